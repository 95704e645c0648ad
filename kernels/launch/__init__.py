"""Pure-Python launch metadata, one module per op, named after the op.

``mingru_kernels.launch.<op>`` holds everything a launcher needs besides the kernels
themselves: supported sizes, tile choices, grids and scratch shapes. Both frontends' thin
launchers (``mingru._launch.<op>``, ``mingru_jax._launch.<op>``) read it, so the two cannot
choose different plans. Nothing in this package imports torch, jax or triton:
:mod:`mingru_kernels.launch.switches` (the test switches: NaN-poisoned outputs and forced
plans) is plain Python too.
"""

FP_FUSION = True
"""``enable_fp_fusion`` of every launch in both frontends: multiplies and adds contract to FMAs,
as the kernels' accuracy and speed were measured. Stated on each launch, not left to Triton's
default: Triton 3.9 warns when it is unset and 3.10 turns it off by default, while jax-triton
passes ``True`` itself, so an unstated default could part the twins."""
