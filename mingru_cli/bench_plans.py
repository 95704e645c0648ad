"""What ``mingru bench`` measures on each device: the groups of cases, their shapes, and the
backends each case is timed on. :func:`make_plan` turns the command-line flags into a
:class:`Plan`; ``Plan.cases()`` builds the cases lazily so a group's inputs exist only while
it runs.

Groups:

* ``cpu-mixers`` — each mixer, fwd and fwd+bwd, ``B=32, T=256, d=64``: step loop vs eager
  (vs ``torch.compile``).
* ``cpu-scans`` — each scan at ``B=16, T=1024, D=64`` (matrix_scan ``n=32, k=2``;
  matrix_affine_scan ``n=8, k=8, v=1``): sequential loop vs eager (vs compile, JAX).
* ``gpu-scans`` — each scan at the lab (``B128 T64 D64``), long (``B16 T1024 D64``) and
  very long (``B16 T16384 D128``) shapes, fwd and fwd+bwd, all backends.
* ``gpu-huge`` — the diagonal scans at ``B8 T65536 D1536``, forward, with the bandwidth floor.
* ``gpu-fused`` — the fused Givens recurrence and delta rule at ``B16 T1024 D64``.
* ``gpu-delta`` — the delta rule at ``B128, 4 heads, d_k = d_v ∈ {16, 64}, T ∈ {64, 256,
  1024}``: fp32 with ``nh = 2`` (eager, compile, triton, peak memory) and bf16 with ``nh = 1``
  (triton vs fla's ``chunk_delta_rule``), with TFLOP/s.
* ``gpu-mixers`` — each mixer fwd and fwd+bwd at ``B16 T4096 d256``, time and peak memory.
* ``gpu-memory`` — ``GivensMinGRU(64, 64, block_size=8, rounds=3)`` fwd+bwd at ``B128 T64``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from mingru_cli import bench_cases

__all__ = ["ALL_BACKENDS", "CASE_NAMES", "GROUPS", "Plan", "make_plan"]

ALL_BACKENDS = ("loop", "eager", "compile", "triton", "jax", "jax-triton", "accelerated_scan", "fla")
GROUPS = {
    "cpu": ("cpu-mixers", "cpu-scans"),
    "cuda": ("gpu-scans", "gpu-huge", "gpu-fused", "gpu-delta", "gpu-mixers", "gpu-memory"),
}
# The delta-rule variants of gpu-delta: (dtype, micro-steps nh).
DELTA_VARIANTS = ((torch.float32, 2), (torch.bfloat16, 1))
GIVENS_MEMORY_CASE = "givens(64,k8,R3)"


def _delta_case_name(dtype: torch.dtype, nh: int) -> str:
    return f"delta_rule {str(dtype).removeprefix('torch.')} nh{nh}"


# The case (op) names of each group: what ``--ops`` filters by substring.
CASE_NAMES: dict[str, tuple[str, ...]] = {
    "cpu-mixers": bench_cases.MIXERS,
    "cpu-scans": bench_cases.SCAN_OPS,
    "gpu-scans": bench_cases.SCAN_OPS,
    "gpu-huge": ("parallel_scan_log", "linear_scan"),
    "gpu-fused": bench_cases.FUSED_OPS,
    "gpu-delta": tuple(_delta_case_name(dt, nh) for dt, nh in DELTA_VARIANTS),
    "gpu-mixers": bench_cases.MIXERS,
    "gpu-memory": (GIVENS_MEMORY_CASE,),
}

NOTES = {
    "cpu-mixers": "Each mixer (input = hidden = d), `loop` = the mixer's `step()` called token "
                  "by token; `eager` = its parallel forward.",
    "cpu-scans": "`loop` = a plain sequential PyTorch loop (one step per token) written in "
                 "`mingru_cli/bench_cases.py`; `eager` = the library's odd–even parallel scan. "
                 "matrix_scan: n=D/2 blocks of 2×2; matrix_affine_scan: n=D/8 blocks of 8×8, v=1.",
    "gpu-scans": "matrix_scan: n=D/2 blocks of 2×2; matrix_affine_scan: n=D/8 blocks of 8×8, "
                 "v=1. Peers solve the same diagonal recurrence (positive a) in their own layout.",
    "gpu-huge": "Forward only. `bw floor` = (bytes of inputs + outputs) / copy bandwidth "
                "measured by a large clone in the same run.",
    "gpu-fused": "givens_recurrence: n=D/8 blocks, k=8, 3 rounds; delta_rule: 4 heads, "
                 "d_k=d_v=D/4, one micro-step (fla: chunk_delta_rule, scale 1).",
    "gpu-delta": "delta_rule, 4 heads, d_k = d_v = d; fp32 rows use nh = 2 micro-steps, bf16 "
                 "rows nh = 1 (fla: chunk_delta_rule, scale 1, its layout prepared outside the "
                 "timing). TFLOP/s counts the recurrent form's useful FLOPs "
                 "(`bench_cases.delta_rule_flops`); ceilings on an H200: about 67 TFLOP/s fp32 "
                 "without tensor cores, about 790 TFLOP/s bf16 dense matmul.",
    "gpu-mixers": "Mixers with input = hidden = d; peak MB = torch.cuda.max_memory_allocated "
                  "above the memory held before the call.",
    "gpu-memory": "GivensMinGRU(64, 64, block_size=8, rounds=3), fwd+bwd.",
}


@dataclass
class Plan:
    device: str
    dtype: torch.dtype
    quick: bool
    groups: list[str]
    backends: list[str]
    warmup: int
    repeats: int
    notes: dict[str, str] = field(default_factory=dict)
    memory_groups: tuple[str, ...] = ("gpu-delta", "gpu-mixers", "gpu-memory")
    skip: dict[str, str] = field(default_factory=dict)  # backend -> why unavailable
    ops: list[str] | None = None  # run only cases whose op name contains one of these
    timer: str = "events"  # CUDA: "events" (do_bench for PyTorch) or "wall" (every backend)

    @property
    def bandwidth(self) -> bool:
        return "gpu-huge" in self.groups or "gpu-scans" in self.groups

    def wants(self, backend: str) -> bool:
        return backend in self.backends and backend not in self.skip

    def cases(self) -> Iterator[bench_cases.Case]:
        for group in self.groups:
            yield from getattr(self, "_" + group.replace("-", "_"))()

    def _selected(self, op: str) -> bool:
        """Whether ``--ops`` keeps the case named ``op`` (checked before its inputs, modules
        and runners are built)."""
        return self.ops is None or any(o in op for o in self.ops)

    # ---- groups

    def _scan_case(self, group: str, op: str, B: int, T: int, D: int, modes=("fwd", "fwd+bwd"),
                   loop_max_t: int = 1 << 30, compile_max_t: int = 1 << 30) -> bench_cases.Case:
        import mingru

        make = bench_cases.scan_inputs(op, B, T, D, self.device, self.dtype)
        case = bench_cases.Case(group, op, f"B{B} T{T} D{D}", make, modes=tuple(modes))
        public = getattr(mingru, op)
        if self.wants("loop"):
            if T <= loop_max_t:
                case.runners["loop"] = bench_cases.LOOPS[op]
            else:
                case.skip["loop"] = (f"only up to T={loop_max_t} in this group" if loop_max_t
                                     else "not run in this group")
        if self.wants("eager"):
            case.runners["eager"] = bench_cases._with_backend("eager", public)
        if self.wants("compile"):
            if T <= compile_max_t:
                case.runners["compile"] = bench_cases.compiled(bench_cases._eager_twin(op))
            else:
                case.skip["compile"] = (f"only up to T={compile_max_t} in this group (compile time)"
                                        if compile_max_t else "not run in this group")
        if self.wants("triton"):
            case.runners["triton"] = bench_cases._with_backend("triton", public)
        if self.wants("jax") or self.wants("jax-triton"):
            try:
                runners = bench_cases.jax_scan_runners(op, make)
            except Exception as exc:  # record, do not abort the whole benchmark
                case.skip["jax"] = f"{type(exc).__name__}: {exc}"
                runners = {}
            for name, runner in runners.items():
                if self.wants(name):
                    case.runners[name] = runner
        if op == "linear_scan" and self.device == "cuda":
            for name, runner in bench_cases.peer_linear_scan_runners(make).items():
                if self.wants(name):
                    case.runners[name] = runner
        self._note_skips(case)
        return case

    def _note_skips(self, case: bench_cases.Case) -> None:
        for backend, why in self.skip.items():
            if backend in self.backends and backend not in case.skip:
                case.skip[backend] = why

    def _mixer_case(self, group: str, name: str, B: int, T: int, d: int,
                    loop: bool = True, compile_: bool = True) -> bench_cases.Case:
        mixer = bench_cases.build_mixer(name, d, self.device, self.dtype)

        def make(rg: bool) -> bench_cases.Tensors:
            g = torch.Generator().manual_seed(1)
            x = torch.randn(B, T, d, generator=g).to(self.device, self.dtype)
            return (x.requires_grad_(rg),)

        case = bench_cases.Case(group, name, f"B{B} T{T} d{d}", make, module=mixer)
        if loop and self.wants("loop"):
            case.runners["loop"] = lambda x: bench_cases.loop_mixer(mixer, x)
        if self.wants("eager"):
            case.runners["eager"] = bench_cases._with_backend("eager", mixer)
        if compile_ and self.wants("compile"):
            case.runners["compile"] = bench_cases._with_backend("eager", bench_cases.compiled(mixer))
        if self.wants("triton"):
            case.runners["triton"] = bench_cases._with_backend("triton", mixer)
        if self.wants("jax") or self.wants("jax-triton"):
            try:
                runners = bench_cases.jax_mixer_runners(name, d, make, self.dtype)
            except Exception as exc:  # e.g. an older mingru_jax: record, do not abort
                case.skip["jax"] = f"{type(exc).__name__}: {exc}"
                runners = {}
            for backend, runner in runners.items():
                if self.wants(backend):
                    case.runners[backend] = runner
        self._note_skips(case)
        return case

    def _cpu_mixers(self) -> Iterator[bench_cases.Case]:
        B, T, d = (4, 32, 16) if self.quick else (32, 256, 64)
        for name in filter(self._selected, CASE_NAMES["cpu-mixers"]):
            yield self._mixer_case("cpu-mixers", name, B, T, d)

    def _cpu_scans(self) -> Iterator[bench_cases.Case]:
        B, T, D = (4, 64, 16) if self.quick else (16, 1024, 64)
        for op in filter(self._selected, CASE_NAMES["cpu-scans"]):
            yield self._scan_case("cpu-scans", op, B, T, D)

    def _gpu_scans(self) -> Iterator[bench_cases.Case]:
        shapes = [(128, 64, 64), (16, 1024, 64)] + ([] if self.quick else [(16, 16384, 128)])
        for op in filter(self._selected, CASE_NAMES["gpu-scans"]):
            for B, T, D in shapes:
                yield self._scan_case("gpu-scans", op, B, T, D, loop_max_t=1024,
                                      compile_max_t=1024)

    def _gpu_huge(self) -> Iterator[bench_cases.Case]:
        B, T, D = (8, 4096, 256) if self.quick else (8, 65536, 1536)
        for op in filter(self._selected, CASE_NAMES["gpu-huge"]):
            yield self._scan_case("gpu-huge", op, B, T, D, modes=("fwd",), loop_max_t=0,
                                  compile_max_t=0)

    def _gpu_fused(self) -> Iterator[bench_cases.Case]:
        B, T, D = 16, 1024, 64
        for op in filter(self._selected, CASE_NAMES["gpu-fused"]):
            make = bench_cases.fused_inputs(op, B, T, D, self.device, self.dtype)
            case = bench_cases.Case("gpu-fused", op, f"B{B} T{T} D{D}", make)
            public = bench_cases.fused_public(op)
            if self.wants("eager"):
                case.runners["eager"] = bench_cases._with_backend("eager", public)
            if self.wants("compile") and not self.quick:
                case.runners["compile"] = bench_cases.compiled(bench_cases.fused_eager(op))
            if self.wants("triton"):
                case.runners["triton"] = bench_cases._with_backend("triton", public)
            if op == "delta_rule" and self.wants("fla"):
                case.runners.update(bench_cases.peer_delta_runners(make))
            yield case

    def _gpu_delta(self) -> Iterator[bench_cases.Case]:
        B, H = (8, 4) if self.quick else (128, 4)
        public = bench_cases.fused_public("delta_rule")
        for dk in (16, 64):
            for T in (64, 256, 1024):
                for dtype, nh in DELTA_VARIANTS:
                    name = _delta_case_name(dtype, nh)
                    if not self._selected(name):
                        continue
                    make = bench_cases.fused_inputs("delta_rule", B, T, H * dk, self.device, dtype,
                                          heads=H, nh=nh)
                    case = bench_cases.Case("gpu-delta", name, f"B{B} T{T} H{H} d{dk}", make,
                                  flops=bench_cases.delta_rule_flops(B, T, H, nh, dk, dk))
                    if dtype == torch.float32:
                        if self.wants("eager"):
                            case.runners["eager"] = bench_cases._with_backend("eager", public)
                        if self.wants("compile") and T >= 256:
                            case.runners["compile"] = bench_cases.compiled(bench_cases.fused_eager("delta_rule"))
                        elif self.wants("compile"):
                            case.skip["compile"] = "only at T ≥ 256 in this group (the target)"
                    if self.wants("triton"):
                        case.runners["triton"] = bench_cases._with_backend("triton", public)
                    if dtype == torch.bfloat16 and self.wants("fla"):
                        case.runners.update(bench_cases.peer_delta_runners(make))
                    self._note_skips(case)
                    yield case

    def _gpu_mixers(self) -> Iterator[bench_cases.Case]:
        B, T, d = (16, 1024, 64) if self.quick else (16, 4096, 256)
        for name in filter(self._selected, CASE_NAMES["gpu-mixers"]):
            yield self._mixer_case("gpu-mixers", name, B, T, d, loop=False,
                                   compile_=not self.quick)

    def _gpu_memory(self) -> Iterator[bench_cases.Case]:
        import mingru

        name = GIVENS_MEMORY_CASE
        if not self._selected(name):
            return
        torch.manual_seed(0)
        mixer = mingru.GivensMinGRU(64, 64, block_size=8, rounds=3).to(self.device, self.dtype)

        def make(rg: bool) -> bench_cases.Tensors:
            g = torch.Generator().manual_seed(2)
            return (torch.randn(128, 64, 64, generator=g).to(self.device, self.dtype)
                    .requires_grad_(rg),)

        case = bench_cases.Case("gpu-memory", name, "B128 T64 d64", make,
                      modes=("fwd+bwd",), module=mixer)
        for backend in ("eager", "triton"):
            if self.wants(backend):
                case.runners[backend] = bench_cases._with_backend(backend, mixer)
        yield case


def make_plan(device: str, quick: bool = False, dtype: torch.dtype = torch.float32,
              groups: list[str] | None = None, backends: list[str] | None = None,
              repeats: int | None = None, warmup: int | None = None,
              ops: list[str] | None = None) -> Plan:
    """Resolve flags into a :class:`Plan`; backends that cannot run here are recorded as skipped."""
    known = GROUPS["cpu"] + GROUPS["cuda"]
    groups = list(groups or GROUPS[device])
    for g in groups:
        if g not in known:
            raise ValueError(f"--groups: unknown group {g!r}; choose from {', '.join(known)}")
        if g.startswith("gpu") and device != "cuda":
            raise ValueError(f"--groups: {g!r} needs --device cuda")
    _check_ops(ops, groups)
    explicit = backends is not None
    backends = list(backends or ALL_BACKENDS)
    for b in backends:
        if b not in ALL_BACKENDS:
            raise ValueError(f"--backends: unknown backend {b!r}; choose from {', '.join(ALL_BACKENDS)}")
    skip: dict[str, str] = {}
    if quick and not explicit:
        skip["compile"] = "--quick"
    why = bench_cases.triton_status(device)
    if why is None and device == "cpu" and not (explicit and "triton" in backends):
        why = "CPU run (the interpreter is for correctness; ask with --backends ...,triton)"
    if why is not None:
        skip["triton"] = why
    if (why := bench_cases.jax_status()) is not None:
        skip["jax"] = skip["jax-triton"] = why
    elif device != "cuda":
        skip["jax-triton"] = "needs CUDA"
    for peer in ("accelerated_scan", "fla"):
        if device != "cuda":
            skip[peer] = "needs CUDA"
        elif (why := bench_cases.peer_status(peer if peer != "fla" else "fla.ops.hgrn")) is not None:
            skip[peer] = why
    if device == "cpu":
        default_warm, default_rep = (1, 3) if quick else (2, 7)
    else:
        default_warm, default_rep = (3, 10)
    return Plan(device=device, dtype=dtype, quick=quick, groups=groups, backends=backends,
                warmup=warmup if warmup is not None else default_warm,
                repeats=repeats if repeats is not None else default_rep,
                notes={g: NOTES.get(g, "") for g in groups}, skip=skip, ops=ops)


def _check_ops(ops: list[str] | None, groups: list[str]) -> None:
    """Every ``--ops`` entry must select at least one case of the chosen groups."""
    if not ops:
        return
    names = list(dict.fromkeys(n for g in groups for n in CASE_NAMES[g]))
    unknown = [o for o in ops if not any(o in n for n in names)]
    if unknown:
        raise ValueError(
            f"--ops: {', '.join(map(repr, unknown))} matches no case in group(s) "
            f"{', '.join(groups)}; valid names (or any part of one): {', '.join(names)}"
        )
