"""No kernel reads a global by name (``mingru_kernels._constants``).

Triton records every global a jit function reads by name (transitively) and compares each with
its current value on every launch through ``JITFunction.run``: about 1 µs of host time per
global per launch. The kernels read their constants as attributes of
``mingru_kernels._constants`` instead, which Triton does not record. The check runs in a
subprocess without ``TRITON_INTERPRET`` (the interpreter's functions keep no such record); it
needs no GPU.
"""

from __future__ import annotations

import textwrap

from tests.helpers import run_offline_gpu_compile

_CHECK = textwrap.dedent(
    """
    import importlib, pkgutil
    import mingru_kernels
    from triton.runtime.jit import JITFunction

    offenders, seen = [], 0
    for info in pkgutil.iter_modules(mingru_kernels.__path__):
        module = importlib.import_module(f"mingru_kernels.{info.name}")
        for name, fn in vars(module).items():
            if isinstance(fn, JITFunction) and fn.__module__ == module.__name__:
                fn.cache_key  # walks the function and everything it calls
                seen += 1
                if fn.used_global_vals:
                    offenders.append((info.name, name, sorted(k[0] for k in fn.used_global_vals)))
    assert seen > 50, seen
    print(offenders if offenders else "OK")
    """
)


def test_no_kernel_reads_a_global_by_name():
    assert run_offline_gpu_compile(_CHECK).strip().splitlines()[-1] == "OK"
