""":func:`import_jax_triton`: jax-triton's import, kept from breaking PyTorch's Triton in the
same process. A module of its own so that a launcher can import it without importing the
launcher registry (``mingru_jax._launch``), which imports the launchers."""

from __future__ import annotations

import os
from typing import Any


def import_jax_triton() -> Any:
    """Import jax-triton without letting it break PyTorch's Triton in the same process.

    jax-triton 0.3 sets ``TRITON_CACHE_DIR=""`` when imported; after that every Triton kernel
    that PyTorch compiles in this process fails with "Could not create or locate cache dir"
    (one process that runs both frontends). jax-triton's own launches do not use that cache,
    so the variable is put back as it was.
    """
    had = "TRITON_CACHE_DIR" in os.environ
    before = os.environ.get("TRITON_CACHE_DIR")
    try:
        import jax_triton
    finally:
        if had:
            os.environ["TRITON_CACHE_DIR"] = before
        else:
            os.environ.pop("TRITON_CACHE_DIR", None)
    return jax_triton
