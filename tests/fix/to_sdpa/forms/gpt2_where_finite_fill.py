"""rewritten: attn_mask=causal_mask

An old GPT-2 `_attn` (transformers 4.x): `torch.where(causal_mask, w, self.masked_bias.to(w.dtype))` with a
finite fill (-1e4), the causal buffer sliced bottom-right (`bias[:, :, ns - nd:ns, :ns]`). A finite fill
is exact as a boolean mask here because a tril buffer sliced at any rows keeps column 0: no row is ever
fully masked."""

import torch
import torch.nn as nn


class GPT2Attention(nn.Module):
    def __init__(self, nx=16, n_ctx=8, n_head=2):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones((n_ctx, n_ctx), dtype=torch.uint8)).view(
            1, 1, n_ctx, n_ctx).bool())
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.n_head = n_head
        self.c_attn = nn.Linear(nx, 3 * nx)

    def _attn(self, q, k, v):
        w = torch.matmul(q, k)
        w = w / (float(v.size(-1)) ** 0.5)
        nd, ns = q.size(-2), k.size(-1)
        causal_mask = self.bias[:, :, ns - nd:ns, :ns]
        w = torch.where(causal_mask, w, self.masked_bias.to(w.dtype))
        w = nn.Softmax(dim=-1)(w)
        return torch.matmul(w, v)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, -1).permute(0, 2, 1, 3)
        k = k.view(b, t, self.n_head, -1).permute(0, 2, 3, 1)
        v = v.view(b, t, self.n_head, -1).permute(0, 2, 1, 3)
        return self._attn(q, k, v).permute(0, 2, 1, 3).reshape(b, t, c)


def make():
    torch.manual_seed(0)
    return GPT2Attention().eval(), (torch.randn(2, 6, 16),)
