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
* ``gpu-delta`` — the delta rule at ``4 heads, d_k = d_v ∈ {16, 64}``, ``B128`` (``B32`` at
  ``T = 4096``): bf16 at ``T ∈ {256, 1024, 4096}`` with ``nh = 1`` (triton vs fla's
  ``chunk_delta_rule``) and with ``nh = 2`` and decay (vs fla's ``chunk_gated_delta_product``);
  fp32 with ``nh ∈ {1, 2}`` at ``T ∈ {256, 1024}`` (eager, compile, triton); TFLOP/s, the
  fractions of the memory and compute floors, peak memory.
* ``gpu-mixers`` — each mixer fwd and fwd+bwd at ``B16 T4096 d256``, time and peak memory.
* ``gpu-memory`` — ``GivensMinGRU(64, 64, block_size=8, rounds=3)`` fwd+bwd at ``B128 T64``.

The model-level groups (any device; opt-in with ``--groups``; shapes below are CUDA's, the CPU
and ``--quick`` variants are small — see ``MIXER_SHAPES``, ``TRAIN_SHAPES``, ``HOST_SHAPES``):

* ``mixers`` — the five mixers (input = hidden = d) fwd and fwd+bwd at ``B16 T4096 d256``
  ("long") and ``B8 T2048 d1024`` ("wide"), fp32 and bf16 autocast: eager, triton,
  compile(eager), compile(triton), and peer-built mixers (MinGRU on fla's ``chunk_hgrn``,
  SignedMinGRU on accelerated-scan). Run by :mod:`mingru_cli.bench_mixers`.
* ``train-step`` — a byte-level language-model training step (embedding → MinGRUStack → head,
  AdamW, bf16 autocast) at "small" ``B8 T2048 d512 L4`` and "medium" ``B4 T4096 d1024 L8``:
  eager, auto, compile(eager), compile(triton), with a profiler breakdown. Run by
  :mod:`mingru_cli.bench_train`.
* ``host`` — host time per call of every public op and mixer at ``B16 T1024 D64`` (batches of
  calls, one sync), plus ``torch.compile`` with and without CUDA graphs. Run by
  :mod:`mingru_cli.bench_host`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from mingru_cli import bench_cases, bench_delta

__all__ = ["ALL_BACKENDS", "CASE_NAMES", "GROUPS", "MODEL_GROUPS", "Plan", "make_plan"]

ALL_BACKENDS = ("loop", "eager", "compile", "triton", "jax", "jax-triton", "accelerated_scan", "fla",
                "auto", "compile(eager)", "compile(triton)", "compile(reduce-overhead)",
                "compile(eager, reduce-overhead)", "compile(triton, reduce-overhead)")
# Shell-friendly spellings accepted by --backends.
BACKEND_ALIASES = {"compile-eager": "compile(eager)", "compile-triton": "compile(triton)",
                   "compile-ro": "compile(reduce-overhead)",
                   "reduce-overhead": "compile(reduce-overhead)",
                   "compile-ro-eager": "compile(eager, reduce-overhead)",
                   "compile-ro-triton": "compile(triton, reduce-overhead)"}
GROUPS = {
    "cpu": ("cpu-mixers", "cpu-scans"),
    "cuda": ("gpu-scans", "gpu-huge", "gpu-fused", "gpu-delta", "gpu-mixers", "gpu-memory"),
}
# Model-level groups: any device, run only when named in --groups.
MODEL_GROUPS = ("mixers", "train-step", "host")
PRECISIONS = ("fp32", "bf16")  # mixers: fp32, or torch.autocast(bfloat16) over fp32 parameters
TRAIN_MIXERS = ("log", "signed", "givens", "delta")
HOST_OPS = ("parallel_scan_log", "linear_scan", "linear_recurrence", "matrix_scan",
            "matrix_affine_scan")
HOST_REFERENCE = "reference (a*2).sum().backward()"
# (size name, dims) per device kind; "quick" is --quick on any device.
MIXER_SHAPES = {  # (B, T, d)
    "cuda": (("long", (16, 4096, 256)), ("wide", (8, 2048, 1024))),
    "cpu": (("long", (4, 1024, 64)), ("wide", (2, 256, 256))),
    "quick": (("long", (2, 64, 16)), ("wide", (1, 32, 64))),
}
TRAIN_SHAPES = {  # (B, T, d_model, n_layers)
    "cuda": (("small", (8, 2048, 512, 4)), ("medium", (4, 4096, 1024, 8))),
    "cpu": (("small", (4, 256, 128, 2)), ("medium", (2, 512, 256, 2))),
    "quick": (("small", (2, 32, 32, 2)), ("medium", (2, 64, 64, 2))),
}
HOST_SHAPES = {  # (B, T, D)
    "cuda": (("B16 T1024 D64", (16, 1024, 64)),),
    "cpu": (("B16 T1024 D64", (16, 1024, 64)),),
    "quick": (("tiny", (2, 64, 16)),),
}


def shape_label(dims: tuple[int, ...]) -> str:
    """``B16 T4096 d256`` (mixers), ``B8 T2048 d512 L4`` (train-step)."""
    return " ".join(f"{p}{v}" for p, v in zip(("B", "T", "d", "L"), dims, strict=False))


def group_shapes(group: str, device: str, quick: bool) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(size, label, dims)`` of a model-level group on ``device``."""
    table = {"mixers": MIXER_SHAPES, "train-step": TRAIN_SHAPES, "host": HOST_SHAPES}[group]
    kind = "quick" if quick else ("cuda" if device == "cuda" else "cpu")
    if group == "host":
        return [(name, f"B{d[0]} T{d[1]} D{d[2]}", d) for name, d in table[kind]]
    return [(name, shape_label(d), d) for name, d in table[kind]]
# The delta-rule variants of gpu-delta: (dtype, micro-steps nh, decay, sequence lengths).
DELTA_HEADS = 4
DELTA_HEAD_SIZES = (16, 64)  # d_k = d_v of gpu-delta's rows
DELTA_VARIANTS = (
    (torch.bfloat16, 1, False, (256, 1024, 4096)),
    (torch.bfloat16, 2, True, (256, 1024, 4096)),
    (torch.float32, 1, False, (256, 1024)),
    (torch.float32, 2, False, (256, 1024)),
)
GIVENS_MEMORY_CASE = "givens(64,k8,R3)"


def _delta_case_name(dtype: torch.dtype, nh: int, decay: bool = False) -> str:
    return f"delta_rule {str(dtype).removeprefix('torch.')} nh{nh}{' decay' if decay else ''}"


# The case (op) names of each group: what ``--ops`` filters by substring.
CASE_NAMES: dict[str, tuple[str, ...]] = {
    "cpu-mixers": bench_cases.MIXERS,
    "cpu-scans": bench_cases.SCAN_OPS,
    "gpu-scans": bench_cases.SCAN_OPS,
    "gpu-huge": ("parallel_scan_log", "linear_scan"),
    "gpu-fused": bench_cases.FUSED_OPS,
    "gpu-delta": tuple(_delta_case_name(dt, nh, dec) for dt, nh, dec, _ in DELTA_VARIANTS),
    "gpu-mixers": bench_cases.MIXERS,
    "gpu-memory": (GIVENS_MEMORY_CASE,),
    "mixers": bench_cases.MIXERS,
    "train-step": TRAIN_MIXERS,
    "host": (*HOST_OPS, *bench_cases.MIXERS, HOST_REFERENCE),
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
    "gpu-delta": "delta_rule, 4 heads, d_k = d_v = d, B128 (B32 at T = 4096); `nh1` rows "
                 "against fla's chunk_delta_rule, `nh2 decay` rows against fla's "
                 "chunk_gated_delta_product (num_householder = nh, log γ as its gate), scale 1, "
                 "fla's layout prepared outside the timing. TFLOP/s counts the recurrent form's useful FLOPs "
                 "(`bench_delta.delta_rule_flops`); ceilings on an H200: about 67 TFLOP/s fp32 "
                 "without tensor cores, about 790 TFLOP/s bf16 dense matmul. `mem floor` = "
                 "least HBM bytes (`bench_delta.delta_rule_bytes`) / copy bandwidth, "
                 "`compute floor` = those FLOPs / the ceiling; `% floor` = the larger floor / "
                 "the time; `err vs f64` = max |o − o₆₄| / max |o₆₄| against the float64 eager "
                 "form on the same (rounded) inputs.",
    "gpu-mixers": "Mixers with input = hidden = d; peak MB = torch.cuda.max_memory_allocated "
                  "above the memory held before the call.",
    "gpu-memory": "GivensMinGRU(64, 64, block_size=8, rounds=3), fwd+bwd.",
    "mixers": "Each mixer with input = hidden = d (DeltaMinGRU: d/64 heads, d_k = d_v = 64; "
              "GivensMinGRU: 8×8 blocks, 3 rounds), fp32 parameters; `bf16` = the call under "
              "`torch.autocast(bfloat16)`. `fwd` under `no_grad`; `fwd+bwd` = forward + "
              "`.float().sum().backward()`. `compile(X)` = `torch.compile` of the mixer call "
              "under `use_backend(X)`; `compile s` = its first call (trace + compile + run), "
              "outside the timing. Peers are mixers written in the benchmark on the library "
              "mixer's own linear layers: `fla` = MinGRU gates in PyTorch + fla's `chunk_hgrn` "
              "(h_0 = 0.5 as its initial_state); `accelerated_scan` = SignedMinGRU gates + "
              "`accelerated_scan.scalar.scan` in (B, D, T), the transposes in and out timed. "
              "`X vs Y` = t_Y / t_X (> 1: X is faster). Peak MB = max allocated during one "
              "call above what was allocated before it.",
    "train-step": "One training step of a byte-level LM: Embedding(256, d) → "
                  "MinGRUStack(d, d, L, mixer, mlp_expansion=4) → Linear(d, 256), cross-entropy, "
                  "AdamW (PyTorch default, foreach on CUDA), bf16 autocast, `loss.backward(); "
                  "opt.step(); opt.zero_grad(set_to_none=True)`. DeltaMinGRU: d/64 heads. "
                  "`auto` = default dispatch; `compile(X)` = every block `torch.compile`d "
                  "(regional compilation: the blocks share one compiled graph) and run under "
                  "`use_backend(X)`; `compile(X, reduce-overhead)` compiles the blocks with "
                  "`mode=\"reduce-overhead\"` (CUDA graphs; `cudagraph_mark_step_begin()` before "
                  "each step; only when named). ms/step = median over the timed steps after warm-up; "
                  "peak MB = max allocated over the timed steps (weights, optimizer state and "
                  "activations); warm-up s = the first step (compiles, optimizer-state init).",
    "host": "Host cost per call: wall clock over a batch of calls (CUDA: 200, fewer — at "
            "least 10 — when a batch would pass 0.5 s: such rows are device-bound) with one "
            "device sync at the end, median of up to 5 batches, µs per call (≈ max(host time, "
            "device time)); "
            "`enqueue µs` (JSON `host_us_per_call`) stops the clock before the sync. Ops "
            "on `bench_cases.scan_inputs` (linear_recurrence on linear_scan's), mixers with "
            "input = hidden = D. `compile` = `torch.compile(fn, fullgraph=True)` of forward + "
            "loss; `compile(reduce-overhead)` adds CUDA graphs (static inputs, "
            "`cudagraph_mark_step_begin()` before each call, grads reset to None).",
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
    timer: str = "events"  # CUDA: "events" (do_bench for PyTorch), "wall" or "loop" (every backend)
    shapes: list[str] | None = None  # model-level groups, gpu-delta: keep the matching sizes
    precisions: tuple[str, ...] = PRECISIONS  # mixers group
    profile_steps: int = 2  # train-step: steps under torch.profiler per row (0: none)
    backward_in_thread: bool = False  # train-step: backward on the calling thread

    @property
    def bandwidth(self) -> bool:
        return any(g in self.groups for g in ("gpu-huge", "gpu-scans", "gpu-delta"))

    def wants(self, backend: str) -> bool:
        return backend in self.backends and backend not in self.skip

    def cases(self, groups: list[str] | None = None) -> Iterator[bench_cases.Case]:
        """The cases of the kernel-level groups (``groups``: default all of the plan's); the
        model-level groups (``MODEL_GROUPS``) run through their own modules."""
        for group in groups if groups is not None else self.groups:
            if group not in MODEL_GROUPS:
                yield from getattr(self, "_" + group.replace("-", "_"))()

    def selected(self, op: str) -> bool:
        """Whether ``--ops`` keeps the case named ``op``."""
        return self._selected(op)

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
            self._add_jax(case, op, make)
        if op == "linear_scan" and self.device == "cuda":
            for name, runner in bench_cases.peer_linear_scan_runners(make).items():
                if self.wants(name):
                    case.runners[name] = runner
        self._note_skips(case)
        return case

    def _add_jax(self, case: bench_cases.Case, op: str,
                 make: Callable[[bool], bench_cases.Tensors]) -> None:
        try:
            runners = bench_cases.jax_scan_runners(op, make)
        except Exception as exc:  # record, do not abort the whole benchmark
            case.skip["jax"] = f"{type(exc).__name__}: {exc}"
            runners = {}
        for name, runner in runners.items():
            if self.wants(name):
                case.runners[name] = runner

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
                case.runners.update(bench_delta.peer_delta_runners(make))
            yield case

    def _gpu_delta(self) -> Iterator[bench_cases.Case]:
        H = DELTA_HEADS
        public = bench_cases.fused_public("delta_rule")
        for dk in DELTA_HEAD_SIZES:
            for dtype, nh, decay, lengths in DELTA_VARIANTS:
                name = _delta_case_name(dtype, nh, decay)
                if not self._selected(name):
                    continue
                for T in (64,) if self.quick else lengths:
                    B, label = _delta_size(T, dk, self.quick)
                    if self.shapes and not any(w in label.split() for w in self.shapes):
                        continue
                    make = bench_cases.fused_inputs("delta_rule", B, T, H * dk, self.device,
                                                    dtype, heads=H, nh=nh, decay=decay)
                    case = bench_cases.Case("gpu-delta", name, label, make,
                                            flops=bench_delta.delta_rule_flops(B, T, H, nh, dk, dk),
                                            bytes_moved=bench_delta.delta_rule_bytes(
                                                B, T, H, nh, dk, dk, dtype, decay),
                                            peak_flops=bench_delta.PEAK_FLOPS[dtype],
                                            reference=bench_delta.float64_output(make))
                    if dtype == torch.float32:
                        if self.wants("eager"):
                            case.runners["eager"] = bench_cases._with_backend("eager", public)
                        if self.wants("compile") and not self.quick:
                            case.runners["compile"] = bench_cases.compiled(
                                bench_cases.fused_eager("delta_rule"))
                    if self.wants("triton"):
                        case.runners["triton"] = bench_cases._with_backend("triton", public)
                    if dtype == torch.bfloat16 and self.wants("fla"):
                        case.runners.update(bench_delta.peer_delta_runners(make, nh, decay))
                    if self.wants("jax") or self.wants("jax-triton"):
                        self._add_jax(case, "delta_rule", make)
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
              ops: list[str] | None = None, shapes: list[str] | None = None,
              precisions: list[str] | None = None, profile_steps: int = 2) -> Plan:
    """Resolve flags into a :class:`Plan`; backends that cannot run here are recorded as skipped."""
    known = GROUPS["cpu"] + GROUPS["cuda"] + MODEL_GROUPS
    groups = list(groups or GROUPS[device])
    for g in groups:
        if g not in known:
            raise ValueError(f"--groups: unknown group {g!r}; choose from {', '.join(known)}")
        if g.startswith("gpu") and device != "cuda":
            raise ValueError(f"--groups: {g!r} needs --device cuda")
    _check_ops(ops, groups)
    _check_shapes(shapes, groups, device, quick)
    precisions = list(precisions or PRECISIONS)
    for p in precisions:
        if p not in PRECISIONS:
            raise ValueError(f"--precisions: unknown precision {p!r}; choose from "
                             f"{', '.join(PRECISIONS)}")
    if profile_steps < 0:
        raise ValueError(f"--profile-steps must be ≥ 0; got {profile_steps}")
    explicit = backends is not None
    backends = [BACKEND_ALIASES.get(b, b) for b in (backends or ALL_BACKENDS)]
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
                notes={g: NOTES.get(g, "") for g in groups}, skip=skip, ops=ops,
                shapes=shapes, precisions=tuple(precisions), profile_steps=profile_steps)


def _delta_size(T: int, dk: int, quick: bool) -> tuple[int, str]:
    """gpu-delta's batch for ``T`` tokens and the size's label (what ``--shapes`` matches)."""
    B = 8 if quick else (32 if T >= 4096 else 128)
    return B, f"B{B} T{T} H{DELTA_HEADS} d{dk}"


def _check_shapes(shapes: list[str] | None, groups: list[str], device: str, quick: bool) -> None:
    """Every ``--shapes`` entry must select a size of the chosen model-level groups."""
    if not shapes:
        return
    model = [g for g in groups if g in MODEL_GROUPS]
    delta = "gpu-delta" in groups
    if not model and not delta:
        raise ValueError(f"--shapes applies to the groups {', '.join(MODEL_GROUPS)} and "
                         "gpu-delta only")
    entries = [(name, label) for g in model for name, label, _ in group_shapes(g, device, quick)]
    words: set[str] = set()
    if delta:  # gpu-delta sizes are selected by one whole word of their label: d64, T1024, B32
        words = {w for dk in DELTA_HEAD_SIZES for _, _, _, lengths in DELTA_VARIANTS
                 for T in ((64,) if quick else lengths) for w in _delta_size(T, dk, quick)[1].split()}
    unknown = [w for w in shapes
               if w not in words and not any(w in n or w in lab for n, lab in entries)]
    if unknown:
        valid = ", ".join([*dict.fromkeys(f"{n} ({lab})" for n, lab in entries), *sorted(words)])
        named = ", ".join([*model, *(["gpu-delta"] if delta else [])])
        raise ValueError(f"--shapes: {', '.join(map(repr, unknown))} matches no size of "
                         f"{named}; valid: {valid}")


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
