"""The forward kernels and their launch: the plain Triton kernel (_forward.py, any GPU and the interpreter), the
Gluon kernel with FlashAttention-3's schedule for sm_90 (_hopper.py, its persistent form _hopper_persistent.py,
its launch _hopper_launch.py), and the per-shape plans that launch either (_forward_plans.py). The package's
_launch.py chooses between them."""
