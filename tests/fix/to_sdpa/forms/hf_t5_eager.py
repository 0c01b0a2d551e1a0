"""rewritten: attn_mask=position_bias, dropout_p=self.dropout if self.training else 0.0, scale=1.0

transformers' T5Attention (eager): no scaling (T5 folds it into the weights: scale=1.0), `scores +=
position_bias` (relative bias plus the padding mask, one float tensor), `softmax(scores.float(),
dim=-1).type_as(scores)`, `nn.functional.dropout(..., training=self.training)`. Not causal."""

import torch
from torch import nn


class T5Attention(nn.Module):
    def __init__(self, d_model=16, n_heads=2, dropout_rate=0.1):
        super().__init__()
        self.n_heads, self.key_value_proj_dim = n_heads, d_model // n_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.dropout = dropout_rate

    def forward(self, hidden_states, position_bias):
        batch_size, seq_length = hidden_states.shape[:2]
        shape = (batch_size, -1, self.n_heads, self.key_value_proj_dim)
        query_states = self.q(hidden_states).view(*shape).transpose(1, 2)
        key_states = self.k(hidden_states).view(*shape).transpose(1, 2)
        value_states = self.v(hidden_states).view(*shape).transpose(1, 2)

        # compute scores, equivalent of torch.einsum("bnqd,bnkd->bnqk", query_states, key_states)
        scores = torch.matmul(query_states, key_states.transpose(3, 2))
        scores += position_bias

        # (batch_size, n_heads, seq_length, key_length)
        attn_weights = nn.functional.softmax(scores.float(), dim=-1).type_as(scores)
        attn_weights = nn.functional.dropout(attn_weights, p=self.dropout, training=self.training)

        attn_output = torch.matmul(attn_weights, value_states)
        attn_output = attn_output.transpose(1, 2).contiguous()
        return attn_output.view(batch_size, -1, self.n_heads * self.key_value_proj_dim)


def make():
    torch.manual_seed(0)
    return T5Attention().eval(), (torch.randn(2, 6, 16), torch.randn(1, 2, 6, 6))
