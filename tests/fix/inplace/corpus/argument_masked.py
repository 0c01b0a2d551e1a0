"""refused: is an argument
forced: input 0 after the call differs
Scores passed in by the caller and masked: in place, the caller's tensor is overwritten, while the
output is the same."""

import torch
import torch.nn as nn

SEQ = 8


class Probabilities(nn.Module):
    def forward(self, scores, mask):
        s = scores.masked_fill(mask, float("-inf"))
        return s.softmax(-1)


def make():
    torch.manual_seed(0)
    return Probabilities(), (torch.randn(2, SEQ, SEQ), torch.ones(SEQ, SEQ, dtype=torch.bool).triu(1))
