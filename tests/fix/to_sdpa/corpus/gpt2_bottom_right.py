"""rewritten: attn_mask=mask != 0

issue 21: GPT-2's bias[:, :, s-t:s, :s] is bottom-right, not is_causal's top-left: it goes to attn_mask=
as written (never is_causal=True), and `nd, ns = w.size(-2), w.size(-1)`, which stays to slice it, reads
q's and k's sizes instead (issue 41)."""


import torch
import torch.nn as nn

B, H, T, S, D = 2, 2, 12, 12, 8

class Attend(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(32, 32, dtype=torch.uint8)).view(1, 1, 32, 32))

    def forward(self, q, k, v):
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / (float(v.size(-1)) ** 0.5)
        nd, ns = w.size(-2), w.size(-1)
        mask = self.bias[:, :, ns - nd : ns, :ns]
        w = w.masked_fill(mask == 0, float("-inf"))
        return torch.matmul(nn.Softmax(dim=-1)(w), v)


def make():
    torch.manual_seed(0)
    q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    return Attend().eval(), (q, k, v)
