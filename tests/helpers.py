"""The comparison helpers every test uses, framework-free: PyTorch tensors, jax arrays and
NumPy arrays all compare in NumPy float64 (:func:`tests.reference.to_numpy`); :func:`rel_err`
compares two CUDA tensors on their device."""

from __future__ import annotations

import numpy as np

from tests.reference import _is_torch, to_numpy


def close(got, want, tol: float = 1e-10, *, elementwise: bool = False) -> None:
    """Assert equal shapes and ``max |got − want| ≤ tol · max(1, max |want|)``: the error
    relative to the largest reference magnitude, absolute below 1.

    ``elementwise=True`` instead bounds every element, ``|got − want| ≤ tol · (1 + |want|)``
    (``np.testing.assert_allclose`` with ``rtol = atol = tol``).
    """
    got, want = to_numpy(got), to_numpy(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if elementwise:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
        return
    err = float(np.abs(got - want).max()) if got.size else 0.0
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    assert err <= tol * scale, f"max error {err:.3g} > {tol:g} · {scale:.3g}"


def rel_err(got, want, floor: float = 1e-30) -> float:
    """``max |got − want| / max(max |want|, floor)``, after asserting equal shapes and a
    finite ``got`` (NaN-poisoned outputs a kernel never wrote fail here).

    Two CUDA tensors on one device compare there, in float64 (the same numbers: a maximum
    does not depend on the order it is taken in); copying a long sequence's outputs to the
    host and comparing them in NumPy costs seconds per tensor."""
    if _on_one_cuda_device(got, want):
        assert got.shape == want.shape, (got.shape, want.shape)
        got, want = got.detach().double(), want.detach().double()
        assert bool(got.isfinite().all()), "non-finite values in the result (an element never written?)"
        return (got - want).abs().max().item() / max(want.abs().max().item(), floor)
    got, want = to_numpy(got), to_numpy(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.isfinite(got).all(), "non-finite values in the result (an element never written?)"
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), floor))


def _on_one_cuda_device(got, want) -> bool:
    """Whether ``got`` and ``want`` are PyTorch tensors on the same CUDA device."""
    return (_is_torch(got) and _is_torch(want) and got.is_cuda and want.is_cuda
            and got.device == want.device)


def assert_rel(got, want, tol: float, what: str = "result", floor: float = 1e-30) -> None:
    """Assert :func:`rel_err` ``≤ tol``, naming ``what`` in the failure."""
    err = rel_err(got, want, floor)
    assert err <= tol, f"{what}: relative error {err:.3g} > {tol}"


def run_offline_gpu_compile(script: str) -> str:
    """Run ``script`` (Python source that compiles kernels for a GPU target with
    ``triton.compile``) in a subprocess without ``TRITON_INTERPRET``, so Triton's CUDA backend
    makes PTX with no GPU present, and return its stdout; skips the test when this Triton has
    no CUDA compile backend, fails it with the script's stderr when the script fails."""
    import os
    import subprocess
    import sys

    import pytest

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=600)
    if res.returncode != 0 and "No module named" in res.stderr:
        pytest.skip(f"no CUDA compile backend in this Triton: {res.stderr[-300:]}")
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout
