"""rewritten: nn.functional.scaled_dot_product_attention(q, k, v, scale=self.scale)

Stable Diffusion's (CompVis ldm) CrossAttention, with the heads folded into the batch: `einsum('b i d, b j d
-> b i j', q, k) * self.scale`, `sim.softmax(dim=-1)`, `einsum('b i j, b j d -> b i d', attn, v)`; the
context is the text encoder's output (another length). Never causal."""

import torch
from torch import einsum, nn


class CrossAttention(nn.Module):
    def __init__(self, query_dim=16, context_dim=12, heads=2, dim_head=8):
        super().__init__()
        inner_dim = dim_head * heads
        self.scale = dim_head ** -0.5
        self.heads = heads
        self.to_q = nn.Linear(query_dim, inner_dim, bias=False)
        self.to_k = nn.Linear(context_dim, inner_dim, bias=False)
        self.to_v = nn.Linear(context_dim, inner_dim, bias=False)
        self.to_out = nn.Linear(inner_dim, query_dim)

    def forward(self, x, context):
        h = self.heads
        q, k, v = self.to_q(x), self.to_k(context), self.to_v(context)
        q, k, v = (t.reshape(t.shape[0], t.shape[1], h, -1).transpose(1, 2).reshape(t.shape[0] * h, t.shape[1], -1)
                   for t in (q, k, v))

        sim = einsum('b i d, b j d -> b i j', q, k) * self.scale
        attn = sim.softmax(dim=-1)

        out = einsum('b i j, b j d -> b i d', attn, v)
        out = out.reshape(x.shape[0], h, x.shape[1], -1).transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return self.to_out(out)


def make():
    torch.manual_seed(0)
    return CrossAttention().eval(), (torch.randn(2, 6, 16), torch.randn(2, 7, 12))
