"""How the jax-triton route compiles the kernels, checked without a GPU: the specialisation
rule (``mingru_jax._launch._compile``, PyTorch's: runtime ints divisible by 16 marked so unless
in ``do_not_specialize``; ``== 1`` a constexpr as jax-triton forces), that every ``T`` of a shape
class traces to the same compiled variants (nothing is compiled per ``T``), — in a subprocess
without the interpreter — that the rule is what makes the PTX use 128-bit loads, and the private
hook that applies it (``mingru_jax._compat``, ``"jax_triton_compile"``) against a stand-in
jax-triton, on and off, inside and outside its version range. On a GPU, a launcher compiled with
the hook on and off computes the same.

Tracing only (``jax.make_jaxpr``): no kernel runs here but in the GPU test. Imports no torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import pytest

from mingru_jax import _compat
from mingru_jax._launch import _compile
from mingru_jax._launch import _elementwise as elementwise
from mingru_jax._launch import delta_rule as delta_launcher
from mingru_jax._launch import givens_recurrence as givens_launcher
from mingru_jax._launch import linear_recurrence as lr_launcher
from mingru_jax._launch import linear_scan as ls_launcher
from mingru_jax._launch import matrix_affine_scan as affine_launcher
from mingru_jax._launch import parallel_scan_log as log_launcher
from mingru_jax._launch._elementwise import carry_adapter
from mingru_kernels import _compat as hooks
from tests.private_hooks import MODES, hook_mode, isolated

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_scalar_rule_matches_pytorchs_launcher():
    fwd = lr_launcher._fwd_adapter  # (a, b, h0, seq, T, D, chunk_len, n_chunks + 1, n_dblk, ...)
    assert _compile.unspecialised(fwd) == {"T", "chunk_len", "n_chunks_p1"}
    # T = 4096 is a multiple of 16 but do_not_specialize: runtime, no hint (one kernel per T).
    assert _compile.scalar_tags(fwd, 4, (4096, 1536, 4096, 3, 48)) == ("", "D", "", "", "D")
    assert _compile.scalar_tags(fwd, 4, (100, 1537, 100, 1, 2)) == ("", "", "", "1", "")
    # ...which is why the adapters take n_chunks + 1: the walk's n_chunks = 1 stays at run time.
    assert elementwise.dims(dict(chunk_len=100, n_chunks=1, n_dblk=2), 100, 1537) == \
        (100, 1537, 100, 2, 2)
    assert _compile.scalar_tag(fwd, 4, 1) == "1"  # jax-triton makes any 1 a constexpr
    # The carry pass follows T through n_chunks: not specialised, as the kernel's own list.
    assert "n_chunks" in _compile.unspecialised(carry_adapter)


def _variants(run, *shapes, dtype=jnp.float32, **kwargs):
    """The compiled variants one forward + backward trace of ``run`` launches."""
    avals = [None if s is None else jax.ShapeDtypeStruct(s, dtype) for s in shapes]

    def fwd_bwd(*xs):
        out, vjp = jax.vjp(lambda *ys: run(*ys, **kwargs), *xs)
        return vjp(out)

    with _compile.recorded_variants() as seen:
        jax.make_jaxpr(fwd_bwd)(*[a for a in avals if a is not None])
    assert seen, "no launch traced"
    return frozenset(seen)


# (B, D) fixed, T across a shape class. Short: at most one 16-row tile (a decode step's class;
# not 1); walk: past it, T ≤ 4 tiles (past that, ops with a look-back split T); chunked /
# look-back: long T at small B·D. T values include multiples of 16 and odd ones.
ELEMENTWISE = {
    "linear_scan": (ls_launcher.run, lambda B, T, D: [(B, T, D), (B, T, D)]),
    "linear_recurrence": (lr_launcher.run, lambda B, T, D: [(B, T, D), (B, T, D)]),
    "parallel_scan_log": (log_launcher.run, lambda B, T, D: [(B, T, D), (B, T + 1, D)]),
}


@pytest.mark.parametrize("op", list(ELEMENTWISE))
@pytest.mark.parametrize("Ts", [(2, 7, 16), (17, 63, 64, 200, 256),
                                (20000, 20001, 32768, 50000)], ids=["short", "walk", "chunked"])
def test_elementwise_ops_compile_once_per_shape_class(op, Ts):
    run, shapes = ELEMENTWISE[op]
    first, *rest = (_variants(run, *shapes(2, T, 48)) for T in Ts)
    for T, other in zip(Ts[1:], rest, strict=True):
        assert other == first, f"T={T} traces other kernel variants than T={Ts[0]}"


def test_block_scans_compile_once_per_shape_class():
    B, n = 2, 3

    def affine(T):
        return _variants(affine_launcher.run, (B, T, n, 2, 2), (B, T, n, 2, 4))

    def givens(T):
        return _variants(givens_launcher.run, (B, T, n, 3, 2), (B, T, n, 4), (B, n, 4),
                         (B, T, n, 4), (B, T, n))

    for build in (affine, givens):
        assert build(5) == build(17) == build(32)  # one segment (T <= SINGLE_PASS_MAX_T)
        assert build(100) == build(5000) == build(5001) == build(9000)  # several segments


def test_delta_rule_compiles_per_divisibility_not_per_T():
    """The delta-rule kernels specialise T (as under PyTorch: not in do_not_specialize), so
    only T's divisibility by 16 and ``T == 1`` pick a variant."""
    B, H, nh, dk, dv = 1, 2, 2, 16, 16

    def build(T):
        shapes = [(B, T, H, dk), (B, T, nh, H, dk), (B, T, nh, H, dv), (B, T, nh, H),
                  (B, T, H), (B, H, dk, dv)]
        return _variants(delta_launcher.run, *shapes)

    assert build(33) == build(47) == build(99)
    assert build(32) == build(64)


_PTX_CHECK = textwrap.dedent(
    """
    import re
    from mingru_jax import _compat
    from mingru_jax._launch import linear_recurrence as L

    # The forward walk of B8 T65536 D1536 as the launcher issues it to jax-triton:
    # (a, b, h0, seq | T, D, chunk_len, n_chunks + 1, n_dblk | h, h_T, values, status).
    def ptx(D, hints):
        n_dblk = -(-D // 32)
        arg = ["*fp32"] * 4 + ["i32"] * 5 + ["*fp32"] * 3 + ["*i32"]
        sc = [(4, "i32", 65536), (5, "i32", D), (6, "i32", 65536), (7, "i32", 2),
              (8, "i32", n_dblk)]
        r = _compat.compile_offline(L._fwd_adapter, arg, sc, dict(
            MODE=0, HAS_H0=True, PACKED=False, BLOCK_T=128, BLOCK_D=32, LOOP_STAGES=1),
            num_warps=4, int_hints=hints)
        text = r["compiled"].asm["ptx"]
        return len(re.findall(r"ld\\.global[^\\n]*\\.v4", text)), r["divisible_16"]

    v4, div = ptx(1536, True)
    assert v4 > 0 and "D" in div and "T" not in div, (v4, div)
    assert ptx(1536, False)[0] == 0  # jax-triton's own rule: no 128-bit loads
    assert ptx(1537, True)[0] == 0  # D not a multiple of 16: none, as under PyTorch

    # The same walk as PyTorch's launcher compiles it (n_chunks at run time, pointers and D
    # 16-aligned, T chunk_len n_chunks do_not_specialize): the jax adapter inlines the kernel
    # to the same machine code, register count included.
    import subprocess, tempfile
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource
    from mingru_kernels import linear_recurrence as K

    def registers(ptx_text):
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx_text)
        out = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name=sm_90a", f.name, "-o",
                              f.name + ".cubin"], capture_output=True, text=True).stderr
        return int(re.search(r"Used (\\d+) registers", out).group(1))

    consts = dict(MODE=0, HAS_H0=True, PACKED=False, BLOCK_T=128, BLOCK_D=32, LOOP_STAGES=1)
    names = list(K.linear_recurrence_fwd_kernel.arg_names)
    sig = {n: ("constexpr" if n in consts else "*fp32" if n.endswith("_ptr") else "i32")
           for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n.endswith("_ptr") or n in ("D", "n_dblk")}
    torch_side = triton.compile(ASTSource(K.linear_recurrence_fwd_kernel, sig, consts, attrs),
                                target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    jax_side = _compat.compile_offline(
        L._fwd_adapter, ["*fp32"] * 4 + ["i32"] * 5 + ["*fp32"] * 3 + ["*i32"],
        [(4, "i32", 65536), (5, "i32", 1536), (6, "i32", 65536), (7, "i32", 2), (8, "i32", 48)],
        consts, num_warps=4)["compiled"]
    r_torch, r_jax = registers(torch_side.asm["ptx"]), registers(jax_side.asm["ptx"])
    assert r_jax == r_torch, (r_jax, r_torch)
    print("OK")
    """
)


def test_pytorch_rule_gives_128_bit_loads():
    """Compiled for sm_90 (no GPU needed: Triton's CUDA backend and its bundled ptxas)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["JAX_PLATFORMS"] = "cpu"
    res = subprocess.run([sys.executable, "-c", _PTX_CHECK], env=env, capture_output=True,
                         text=True, timeout=600)
    if res.returncode != 0 and ("ptxas" in res.stderr or "No module named" in res.stderr):
        pytest.skip(f"no CUDA compile toolchain in this Triton: {res.stderr[-300:]}")
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("OK")


# ----------------------------------------------------------------------------- the hook

HOOK = "jax_triton_compile"


class _StandIn:
    """A stand-in ``jax_triton`` (version ``version``) whose ``triton_lib`` records what its
    own ``get_or_create_triton_kernel`` is asked."""

    def __init__(self, monkeypatch, version="0.3.1", function=True):
        self.calls = []
        package = types.ModuleType("jax_triton")
        package.__version__ = version
        lib = types.ModuleType("jax_triton.triton_lib")
        lib.triton_kernel_call_lib = types.SimpleNamespace()
        if function:
            def get_or_create_triton_kernel(backend_init_func, platform, fn, arg_dtypes,
                                            scalar_args, **kwargs):
                self.calls.append(fn)
                return "jax-triton's kernel", "jax-triton's attrs"

            lib.get_or_create_triton_kernel = get_or_create_triton_kernel
        package.triton_lib = lib
        self.lib = lib
        monkeypatch.setitem(sys.modules, "jax_triton", package)
        monkeypatch.setitem(sys.modules, "jax_triton.triton_lib", lib)

    def lower(self, fn, platform="cuda"):
        """What the lowering of ``fn`` gets from (the possibly wrapped) function."""
        return self.lib.get_or_create_triton_kernel(None, platform, fn, ["*fp32"], (),
                                                    num_warps=4)


@pytest.fixture
def fresh_hook():
    """The hook not yet decided nor installed (and so again after the test)."""
    with isolated():
        hooks._available.pop(HOOK, None)
        hooks._active.pop(HOOK, None)
        hooks._warned.discard(HOOK)
        _compat._install.cache_clear()
        try:
            yield
        finally:
            _compat._install.cache_clear()


def _fake_compile(monkeypatch, calls):
    def compile_record(jtl, backend_init_func, fn, arg_dtypes, scalar_args, **kwargs):
        calls.append(fn)
        return {"kernel": "our kernel", "attrs": "our attrs"}

    monkeypatch.setattr(_compat, "_compile_record", compile_record)


@pytest.mark.parametrize("mode", MODES)
def test_the_hook_compiles_our_kernels_only_while_active(monkeypatch, fresh_hook, mode):
    jt = _StandIn(monkeypatch)
    ours, theirs, compiled = object(), object(), []
    _fake_compile(monkeypatch, compiled)
    _compat.use_pytorch_compile(ours)
    with hook_mode(HOOK, mode):  # decided at each lowering
        got = jt.lower(ours)
    if mode == "on":
        assert got == ("our kernel", "our attrs") and compiled == [ours] and not jt.calls
    else:
        assert got == ("jax-triton's kernel", "jax-triton's attrs") and not compiled
    # Kernels not launched through launch(), and other platforms, keep jax-triton's compile.
    assert jt.lower(theirs)[0] == jt.lower(ours, platform="rocm")[0] == "jax-triton's kernel"


def test_a_failed_compile_falls_back_to_jax_tritons_own(monkeypatch, fresh_hook):
    if hooks._switched_off():
        pytest.skip("MINGRU_PRIVATE_HOOKS=0")
    jt = _StandIn(monkeypatch)

    def broken(*args, **kwargs):
        raise ValueError("no such option")

    monkeypatch.setattr(_compat, "_compile_record", broken)
    def ours():  # a kernel stand-in with a name
        pass
    _compat.use_pytorch_compile(ours)
    with pytest.warns(RuntimeWarning, match="no such option"):
        assert jt.lower(ours)[0] == "jax-triton's kernel"


@pytest.mark.parametrize(("version", "function"), [("0.4.0", True), ("0.3.0", True),
                                                   ("0.3.1", False)])
def test_outside_its_range_jax_tritons_own_compile_runs(monkeypatch, fresh_hook, version,
                                                        function):
    hooks._switch[:] = [False]
    jt = _StandIn(monkeypatch, version=version, function=function)
    original = getattr(jt.lib, "get_or_create_triton_kernel", None)
    with pytest.warns(RuntimeWarning) as record:
        _compat.use_pytorch_compile(object())
        _compat.use_pytorch_compile(object())
    [warning] = [w for w in record if HOOK in str(w.message)]
    assert f"jax-triton {version}" in str(warning.message)
    assert ">=0.3.1,<0.4" in str(warning.message)
    assert getattr(jt.lib, "get_or_create_triton_kernel", None) is original  # not wrapped
    assert not hooks.hook_active(HOOK)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_both_compiles_compute_the_same(monkeypatch, mode):
    """A fresh ``jax.jit`` per mode: the hook is decided when a function is lowered."""
    import numpy as np

    from mingru_jax._eager.linear_scan import linear_scan_eager

    if jax.default_backend() != "gpu":
        pytest.skip("needs jax's GPU backend (the jax-triton route)")
    calls = []
    record = _compat._compile_record

    def spy(*args, **kwargs):
        calls.append(args[2])
        return record(*args, **kwargs)

    monkeypatch.setattr(_compat, "_compile_record", spy)
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.uniform(0.5, 1.0, (2, 300, 48)), jnp.float32)
    b = jnp.asarray(rng.uniform(-1.0, 1.0, (2, 300, 48)), jnp.float32)
    with hook_mode(HOOK, mode):
        got = jax.jit(lambda a, b: ls_launcher.run(a, b))(a, b)
    assert bool(calls) is (mode == "on")
    for g, e in zip(got, linear_scan_eager(a, b), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-5)
