"""Pure-Python launch metadata, one module per op, named after the op.

``mingru_kernels.launch.<op>`` holds everything a launcher needs besides the kernels
themselves: supported sizes, tile choices, grids and scratch shapes. Both frontends' thin
launchers (``mingru._launch.<op>``, ``mingru_jax._launch.<op>``) read it, so the two cannot
choose different plans. Nothing in this package imports torch, jax or triton:
:mod:`mingru_kernels.launch.switches` (the test switches: NaN-poisoned outputs and forced
plans) is plain Python too.
"""
