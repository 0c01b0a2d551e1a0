"""refused: which may be a tensor

Hostile: the scale is a float at every call the factory makes, but a `set_temperature()` method makes it
a tensor: `scale=self.scale` would then raise where the original runs."""

import torch
import torch.nn as nn


class Attend(nn.Module):
    def __init__(self, head_dim=8):
        super().__init__()
        self.scale = head_dim ** -0.5

    def set_temperature(self, t: float):
        self.scale = torch.tensor(t)

    def forward(self, q, k, v):
        s = (q @ k.transpose(-2, -1)) * self.scale
        return torch.softmax(s, dim=-1) @ v


def make():
    torch.manual_seed(0)
    return Attend().eval(), tuple(torch.randn(2, 2, 6, 8) for _ in range(3))
