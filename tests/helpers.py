"""The comparison helpers every test uses, framework-free: PyTorch tensors, jax arrays and
NumPy arrays all compare in NumPy float64 (:func:`tests.reference.to_numpy`)."""

from __future__ import annotations

import numpy as np

from tests.reference import to_numpy


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
    finite ``got`` (NaN-poisoned outputs a kernel never wrote fail here)."""
    got, want = to_numpy(got), to_numpy(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.isfinite(got).all(), "non-finite values in the result (an element never written?)"
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), floor))


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
