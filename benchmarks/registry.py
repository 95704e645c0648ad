"""The benchmark cases: every suite's cases, shapes, precisions and candidate backends.

Pure Python (no framework is imported here): a Flax-only install can list and select the JAX
suite's cases. A :class:`Case` is one row group of a table — an op, mixer or model at one
shape and precision — timed once per mode and backend by :mod:`mingru_benchmarks.run`.

Backends:

* ``ours`` — the library's default dispatch (``MINGRU_SCAN`` unset: the kernels where they are
  measured faster, eager elsewhere); ``triton`` forces the kernels (``use_backend("triton")``,
  opt-in except in ``host``); ``eager`` forces the eager path; ``compile`` is
  ``torch.compile`` of the eager path (skipped by ``--quick`` unless named);
* peers, where a library solves the same recurrence: ``fla``, ``accelerated-scan``,
  ``minGRU-pytorch``;
* ``jax`` (the ``mingru_jax`` eager path under ``jax.jit``) and ``jax-triton`` (its kernels);
* the ``decode`` suite's own (:mod:`mingru_benchmarks.decode`): ``ours`` (CUDA-graph decoding),
  ``step-loop``, ``gpt2`` (transformers), ``jax``; ``chunked`` and ``unchunked`` prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BACKENDS", "MIXERS", "OPS", "PEERS", "SUITES", "Case", "Skip", "cases"]

OPS = ("parallel_scan_log", "linear_scan", "linear_recurrence", "matrix_scan",
       "matrix_affine_scan", "mingru_cell", "signed_mingru_cell", "givens_cell", "rotation_cell")
MIXERS = ("MinGRU", "SignedMinGRU", "RotationMinGRU", "GivensMinGRU", "DeltaMinGRU")
ELEMENTWISE = ("parallel_scan_log", "linear_scan", "linear_recurrence", "mingru_cell",
               "signed_mingru_cell")
DELTA = ("delta_rule nh1", "delta_rule nh2 decay")
HOOKS = ("triton_launch", "jax_triton_compile", "all")
TRAIN_MIXERS = ("MinGRU", "SignedMinGRU", "GivensMinGRU", "DeltaMinGRU")
DECODE_BACKENDS = ("ours", "eager-step", "step-loop", "gpt2", "jax")
PREFILL_BACKENDS = ("chunked", "unchunked")
BACKENDS = ("ours", "triton", "eager", "compile", "fla", "accelerated-scan", "minGRU-pytorch",
            "jax", "jax-triton", "eager-step", "step-loop", "gpt2", *PREFILL_BACKENDS)
PEERS: dict[str, tuple[str, ...]] = {  # case -> peers computing the same recurrence
    "parallel_scan_log": ("minGRU-pytorch",),
    "linear_recurrence": ("accelerated-scan", "fla"),
    "mingru_cell": ("fla", "minGRU-pytorch"),
    "signed_mingru_cell": ("accelerated-scan",),
    "MinGRU": ("fla", "minGRU-pytorch"),
    "SignedMinGRU": ("accelerated-scan",),
}
SUITES = ("headline", "ops", "mixers", "train-step", "hooks", "host", "delta", "memory-floor",
          "jax", "decode")

# (cuda, cpu, quick) shapes: (B, T, D) for ops, mixers, host and jax; (B, T, d, layers) for the
# training step; lists for delta (B, T, heads, d_k), memory-floor and decode (B, prompt, new
# tokens, d, layers).
SHAPES: dict[str, dict[str, list[tuple[int, ...]]]] = {
    "ops": {"cuda": [(16, 4096, 256)], "cpu": [(4, 512, 64)], "quick": [(2, 32, 16)]},
    "train-step": {"cuda": [(8, 2048, 512, 4)], "cpu": [(4, 256, 128, 2)],
                   "quick": [(2, 32, 32, 2)]},
    "host": {"cuda": [(2, 64, 32)], "cpu": [(2, 64, 32)], "quick": [(2, 16, 16)]},
    "delta": {"cuda": [(32, 4096, 4, 64), (128, 1024, 4, 64)], "cpu": [(4, 256, 2, 32)],
              "quick": [(2, 32, 2, 8)]},
    "memory-floor": {"cuda": [(8, 65536, 1536), (16, 16384, 128)], "cpu": [(4, 4096, 64)],
                     "quick": [(2, 64, 16)]},
    "decode": {"cuda": [(b, p, 256, 512, 4) for p in (128, 8192) for b in (1, 64)],
               "cpu": [(1, 64, 16, 128, 2), (4, 256, 16, 128, 2)],
               "quick": [(1, 8, 8, 32, 2), (2, 8, 8, 32, 2)]},
}


class Skip(Exception):
    """A backend that cannot run a case here; the message says why (recorded in the row)."""


@dataclass(frozen=True)
class Case:
    """One row group: ``name`` (op, mixer, model or hook) of ``suite`` at ``dims``.

    ``precision`` is ``fp32`` or ``bf16`` (inputs in bf16 for ops and the delta rule, bf16
    autocast over fp32 parameters for mixers and the training step); ``modes`` are ``fwd``
    (under ``no_grad``), ``fwd+bwd`` (forward, then ``.float().sum()`` of every output
    backward), ``step`` (one optimizer step), or the decode suite's ``decode`` (per new token)
    and ``prefill``."""

    suite: str
    name: str
    dims: tuple[int, ...]
    precision: str = "fp32"
    modes: tuple[str, ...] = ("fwd", "fwd+bwd")
    backends: tuple[str, ...] = ("ours", "triton", "eager", "compile")

    @property
    def shape(self) -> str:
        """``B16 T4096 D256``, ``B8 T2048 d512 L4`` (training step), ``B32 T4096 H4 d64`` (delta)."""
        letters = {"train-step": "BTdL", "hooks": "BTdL", "delta": "BTHd", "mixers": "BTd",
                   "decode": "BPNdL"}
        return " ".join(f"{p}{v}" for p, v in zip(letters.get(self.suite, "BTD"), self.dims,
                                                   strict=False))


def _kind(device: str, quick: bool) -> str:
    return "quick" if quick else ("cuda" if device == "cuda" else "cpu")


def _ops(names: tuple[str, ...], dims: tuple[int, ...], precisions: tuple[str, ...],
         suite: str = "ops") -> list[Case]:
    return [Case(suite, n, dims, p, backends=(*Case.backends, *PEERS.get(n, ())))
            for p in precisions for n in names]


def cases(suite: str, device: str, quick: bool) -> list[Case]:
    """Every case of ``suite`` on ``device`` (``--quick``: tiny shapes)."""
    kind = _kind(device, quick)
    (op_dims,) = SHAPES["ops"][kind]
    (lm_dims,) = SHAPES["train-step"][kind]
    jax_backends = ("ours", "jax", "jax-triton")
    if suite == "headline":  # the page's first table: one shape per op and mixer, ops in fp32,
        # mixers under bf16 autocast (the training precision); compiles keep it to minutes
        return [*_ops(OPS, op_dims, ("fp32",)), *_ops(MIXERS, op_dims, ("bf16",), "mixers"),
                Case("train-step", "MinGRU", lm_dims, "bf16", ("step",), ("ours", "eager", "compile")),
                *[Case("jax", n, op_dims, backends=jax_backends)
                  for n in ("parallel_scan_log", "linear_recurrence", "mingru_cell", "MinGRU")]]
    if suite in ("ops", "mixers"):
        return _ops(OPS if suite == "ops" else MIXERS, op_dims, ("fp32", "bf16"), suite)
    if suite == "train-step":
        return [Case(suite, n, lm_dims, "bf16", ("step",)) for n in TRAIN_MIXERS]
    if suite == "hooks":
        return [Case(suite, h, lm_dims, "bf16", ("step",), ("on", "off")) for h in HOOKS]
    if suite == "host":
        (dims,) = SHAPES["host"][kind]
        return [Case(suite, n, dims, backends=("ours", "triton", "eager")) for n in (*OPS, *MIXERS)]
    if suite == "delta":
        return [Case(suite, n, dims, p, backends=("ours", "eager", *(("fla",) if p == "bf16"
                                                                    else ())))
                for dims in SHAPES["delta"][kind] for p in ("bf16", "fp32") for n in DELTA]
    if suite == "memory-floor":
        return [Case(suite, n, dims, modes=("fwd",), backends=("ours", *PEERS.get(n, ())))
                for dims in SHAPES["memory-floor"][kind] for n in ELEMENTWISE]
    if suite == "jax":
        return [Case(suite, n, op_dims, backends=jax_backends) for n in (*OPS, *MIXERS)]
    if suite == "decode":  # GPT-2 does not depend on the mixer: measured with MinGRU only
        return [Case(suite, n, dims, p, ("decode", "prefill"),
                     tuple(b for b in (*DECODE_BACKENDS, *PREFILL_BACKENDS)
                           if b != "gpt2" or n == "MinGRU"))
                for n in TRAIN_MIXERS for dims in SHAPES["decode"][kind] for p in ("fp32", "bf16")]
    raise ValueError(f"--suite: unknown suite {suite!r}; choose from {', '.join(SUITES)}")
