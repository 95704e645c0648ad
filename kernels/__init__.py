"""mingru_kernels — the Triton kernel sources shared by ``mingru`` and ``mingru_jax``.

Framework-free: no module here imports torch or jax. One module per op holds its forward and
backward ``@triton.jit`` kernels side by side, plus pure-Python launch metadata (block sizes,
grids) that both frontends' thin launchers use. Importing this package does not import
Triton; importing one of its op modules does.
"""
