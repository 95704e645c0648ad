"""Eager (pure JAX) twins of every kernel op; they run on any backend.

One module per op, named like :mod:`mingru._eager`. The scans use
:func:`jax.lax.associative_scan` with the same combine algebras as
``mingru/_eager/_odd_even.py``; gradients come from JAX's autodiff.
"""
