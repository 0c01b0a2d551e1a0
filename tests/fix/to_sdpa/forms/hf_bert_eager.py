"""rewritten: attn_mask=attention_mask

transformers' BertSelfAttention (eager, weights not asked for): `transpose_for_scores`,
`/ math.sqrt(self.attention_head_size)`, `if attention_mask is not None: attention_scores =
attention_scores + attention_mask` (the extended float mask: 0 or the dtype's minimum), `self.dropout`.
A BERT encoder is never causal: no is_causal."""

import math

import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size=16, num_attention_heads=2, attention_probs_dropout_prob=0.1):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.all_head_size = hidden_size
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)
        self.dropout = nn.Dropout(attention_probs_dropout_prob)

    def transpose_for_scores(self, x: torch.Tensor) -> torch.Tensor:
        new_x_shape = x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)
        return x.view(new_x_shape).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))

        # Take the dot product between "query" and "key" to get the raw attention scores.
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            # Apply the attention mask is (precomputed for all layers in BertModel forward() function)
            attention_scores = attention_scores + attention_mask

        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        attention_probs = self.dropout(attention_probs)

        context_layer = torch.matmul(attention_probs, value_layer)
        context_layer = context_layer.permute(0, 2, 1, 3).contiguous()
        return context_layer.view(context_layer.size()[:-2] + (self.all_head_size,))


def make():
    torch.manual_seed(0)
    keep = torch.ones(2, 6)
    keep[1, 4:] = 0  # the second sample padded
    extended = (1.0 - keep[:, None, None, :]) * torch.finfo(torch.float32).min
    return BertSelfAttention().eval(), (torch.randn(2, 6, 16), extended)


def hostile(inputs):
    x, mask = inputs
    padded = mask.clone()
    padded[1] = torch.finfo(torch.float32).min  # a fully padded sample: an additive mask adds as SDPA's does
    return [(x, padded)]
