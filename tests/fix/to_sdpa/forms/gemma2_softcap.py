"""refused: soft-capping

transformers' Gemma-2 eager attention: the scores are soft-capped with tanh before the mask; SDPA has no
soft-cap."""

import torch
import torch.nn as nn


class Gemma2Attention(nn.Module):
    def __init__(self, dim=16, heads=2, softcap=50.0):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.scaling = self.head_dim ** -0.5
        self.attn_logit_softcapping = softcap
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x, attention_mask=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        attn_weights = torch.matmul(q, k.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights / self.attn_logit_softcapping
        attn_weights = torch.tanh(attn_weights)
        attn_weights = attn_weights * self.attn_logit_softcapping
        if attention_mask is not None:
            attn_weights = attn_weights + attention_mask
        attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(attn_weights, v).transpose(1, 2).reshape(b, t, -1)


def make():
    torch.manual_seed(0)
    return Gemma2Attention().eval(), (torch.randn(2, 6, 16),)
