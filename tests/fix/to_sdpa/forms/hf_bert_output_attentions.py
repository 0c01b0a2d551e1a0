"""refused: handed to the caller

transformers' BertSelfAttention returning its probabilities when `output_attentions` is set: SDPA never
computes them."""

import math

import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, hidden_size=16, num_attention_heads=2):
        super().__init__()
        self.num_attention_heads = num_attention_heads
        self.attention_head_size = hidden_size // num_attention_heads
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size)

    def transpose_for_scores(self, x):
        return x.view(x.size()[:-1] + (self.num_attention_heads, self.attention_head_size)).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None, output_attentions=False):
        query_layer = self.transpose_for_scores(self.query(hidden_states))
        key_layer = self.transpose_for_scores(self.key(hidden_states))
        value_layer = self.transpose_for_scores(self.value(hidden_states))
        attention_scores = torch.matmul(query_layer, key_layer.transpose(-1, -2))
        attention_scores = attention_scores / math.sqrt(self.attention_head_size)
        if attention_mask is not None:
            attention_scores = attention_scores + attention_mask
        attention_probs = nn.functional.softmax(attention_scores, dim=-1)
        context_layer = torch.matmul(attention_probs, value_layer)
        outputs = (context_layer, attention_probs) if output_attentions else (context_layer,)
        return outputs


def make():
    torch.manual_seed(0)
    return BertSelfAttention().eval(), (torch.randn(2, 6, 16), torch.zeros(2, 1, 1, 6))
