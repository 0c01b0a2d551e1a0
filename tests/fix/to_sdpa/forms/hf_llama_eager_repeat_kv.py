"""rewritten: attn_mask=(attention_mask[:, :, :, :key_states.shape[-2]] if attention_mask is not None else None)

transformers' Llama eager_attention_forward as a method (only the output used): `repeat_kv` left in
place, `* self.scaling`, the causal mask (here a sliding window) passed in as a float mask and sliced to
the keys under `if attention_mask is not None:`, softmax in fp32 then `.to(query.dtype)`, F.dropout."""

import torch
from torch import nn


def repeat_kv(hidden_states: torch.Tensor, n_rep: int) -> torch.Tensor:
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, hidden=16, heads=4, kv_heads=2, dropout=0.0):
        super().__init__()
        self.head_dim = hidden // heads
        self.heads, self.kv_heads = heads, kv_heads
        self.num_key_value_groups = heads // kv_heads
        self.scaling = self.head_dim ** -0.5
        self.attention_dropout = dropout
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)

    def forward(self, hidden_states, attention_mask=None):
        b, t, _ = hidden_states.shape
        query = self.q_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        key = self.k_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)
        value = self.v_proj(hidden_states).view(b, t, -1, self.head_dim).transpose(1, 2)

        key_states = repeat_kv(key, self.num_key_value_groups)
        value_states = repeat_kv(value, self.num_key_value_groups)

        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * self.scaling
        if attention_mask is not None:
            causal_mask = attention_mask[:, :, :, : key_states.shape[-2]]
            attn_weights = attn_weights + causal_mask

        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
        attn_weights = nn.functional.dropout(attn_weights, p=self.attention_dropout, training=self.training)
        attn_output = torch.matmul(attn_weights, value_states)
        return attn_output.transpose(1, 2).reshape(b, t, -1)


def sliding_window(t: int, window: int) -> torch.Tensor:
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    allowed = (j <= i) & (j > i - window)
    return torch.zeros(t, t).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]


def make():
    torch.manual_seed(0)
    return LlamaAttention().eval(), (torch.randn(2, 6, 16), sliding_window(6, 3))
