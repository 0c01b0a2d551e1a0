"""What one timed call of `--mode train` is: a layer's training step (the gradients of q, k and v) here; a whole
model's (`--target`: the gradients of its parameters) is fix.target.model_training_step."""

from __future__ import annotations

from attnprof.variants.base import Forward


def training_step(forward: Forward, args: tuple, grad_out=None) -> Forward:
    """forward + backward as one call: the forward under autograd, then the gradients of q, k and v for a
    fixed output gradient (default random), by torch.autograd.grad (what a layer inside a model computes;
    no AccumulateGrad into .grad). Returns the forward's output; inputs are made leaves that require grad."""
    import torch

    if grad_out is None:
        gen = torch.Generator(device=args[0].device).manual_seed(1)
        grad_out = torch.randn(args[0].shape, dtype=args[0].dtype, device=args[0].device, generator=gen)

    def step(*inputs):
        for t in inputs:
            if not t.requires_grad:
                t.requires_grad_()  # once per tensor: rotated copies arrive without it
        with torch.enable_grad():
            out = forward(*inputs)
            torch.autograd.grad(out, inputs, grad_out)
        return out.detach()

    step.__name__ = f"{getattr(forward, '__name__', 'forward')}_step"
    return step
