"""The backward kernels and their launch: the deterministic two passes (_backward_kernels.py, launched by
_backward.py), the single pass with float32 atomic dQ (_backward_atomic_kernels.py, _backward_single.py), that
single pass in Gluon for sm_90 (_backward_hopper.py, _backward_hopper_launch.py), and the masked backward
(_masked_backward_kernels.py, launched by masked_backward.py with the masks' autograd)."""
