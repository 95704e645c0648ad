"""How the jax-triton route compiles the kernels (mingru_jax/_launch/_compile.py), checked
without a GPU: the specialisation rule (PyTorch's: runtime ints divisible by 16 marked so unless
in ``do_not_specialize``; ``== 1`` a constexpr as jax-triton forces), that every ``T`` of a shape
class traces to the same compiled variants (nothing is compiled per ``T``), and — in a
subprocess without the interpreter — that the rule is what makes the PTX use 128-bit loads.

Tracing only (``jax.make_jaxpr``): no kernel runs here. Imports no torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from mingru_jax._launch import _compile
from mingru_jax._launch import _elementwise as elementwise
from mingru_jax._launch import delta_rule as delta_launcher
from mingru_jax._launch import givens_recurrence as givens_launcher
from mingru_jax._launch import linear_recurrence as lr_launcher
from mingru_jax._launch import linear_scan as ls_launcher
from mingru_jax._launch import matrix_affine_scan as affine_launcher
from mingru_jax._launch import parallel_scan_log as log_launcher
from mingru_jax._launch._elementwise import carry_adapter

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_scalar_rule_matches_pytorchs_launcher():
    fwd = lr_launcher._fwd_adapter  # (a, b, h0, seq, s1, s2, T, D, chunk_len, n_chunks + 1, n_dblk, ...)
    assert _compile.unspecialised(fwd) == {"T", "chunk_len", "n_chunks_p1"}
    # T = 4096 is a multiple of 16 but do_not_specialize: runtime, no hint (one kernel per T).
    assert _compile.scalar_tags(fwd, 6, (4096, 1536, 4096, 3, 48)) == ("", "D", "", "", "D")
    assert _compile.scalar_tags(fwd, 6, (100, 1537, 100, 1, 2)) == ("", "", "", "1", "")
    # ...which is why the adapters take n_chunks + 1: the walk's n_chunks = 1 stays at run time.
    assert elementwise.dims(dict(chunk_len=100, n_chunks=1, n_dblk=2), 100, 1537) == \
        (100, 1537, 100, 2, 2)
    assert _compile.scalar_tag(fwd, 6, 1) == "1"  # jax-triton makes any 1 a constexpr
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


# (B, D) fixed, T across a shape class. Walk: T ≤ 4 tiles (and not 1; past that, ops with a
# look-back split T); chunked / look-back: long T at small B·D. T values include multiples of 16 and odd ones.
ELEMENTWISE = {
    "linear_scan": (ls_launcher.run, lambda B, T, D: [(B, T, D), (B, T, D)]),
    "linear_recurrence": (lr_launcher.run, lambda B, T, D: [(B, T, D), (B, T, D)]),
    "parallel_scan_log": (log_launcher.run, lambda B, T, D: [(B, T, D), (B, T + 1, D)]),
}


@pytest.mark.parametrize("op", list(ELEMENTWISE))
@pytest.mark.parametrize("Ts", [(2, 7, 64, 200, 256), (20000, 20001, 32768, 50000)],
                         ids=["walk", "chunked"])
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
    from mingru_jax._launch import _compile
    from mingru_jax._launch import linear_recurrence as L

    # The forward walk of B8 T65536 D1536 as the launcher issues it to jax-triton:
    # (a, b, h0, seq, s1, s2 | T, D, chunk_len, n_chunks, n_dblk | h, h_T, values, status).
    def ptx(D, hints):
        n_dblk = -(-D // 32)
        arg = ["*fp32"] * 6 + ["i32"] * 5 + ["*fp32"] * 3 + ["*i32"]
        sc = [(6, "i32", 65536), (7, "i32", D), (8, "i32", 65536), (9, "i32", 2),
              (10, "i32", n_dblk)]
        r = _compile.compile_offline(L._fwd_adapter, arg, sc, dict(
            MODE=0, HAS_H0=True, PACKED=False, BLOCK_T=128, BLOCK_D=32, LOOP_STAGES=1, EVEN=False,
            SCALAR=False),
            num_warps=4,
            int_hints=hints)
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

    consts = dict(MODE=0, HAS_H0=True, PACKED=False, BLOCK_T=128, BLOCK_D=32, LOOP_STAGES=1, EVEN=False,
                  SCALAR=False)
    names = list(K.linear_recurrence_fwd_kernel.arg_names)
    sig = {n: ("constexpr" if n in consts else "*fp32" if n.endswith("_ptr") else "i32")
           for n in names}
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
             if n.endswith("_ptr") or n in ("D", "n_dblk")}
    torch_side = triton.compile(ASTSource(K.linear_recurrence_fwd_kernel, sig, consts, attrs),
                                target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    jax_side = _compile.compile_offline(
        L._fwd_adapter, ["*fp32"] * 6 + ["i32"] * 5 + ["*fp32"] * 3 + ["*i32"],
        [(6, "i32", 65536), (7, "i32", 1536), (8, "i32", 65536), (9, "i32", 2), (10, "i32", 48)],
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
