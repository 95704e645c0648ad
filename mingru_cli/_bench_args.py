"""The ``mingru bench`` flags, in pure Python (no torch), so ``mingru --help`` and
``mingru bench --help`` work with either framework alone. :mod:`mingru_cli.bench` runs them."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``mingru bench`` flags."""
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where to run (default: cuda if available, else cpu)")
    p.add_argument("--quick", action="store_true",
                   help="small shapes, few repeats, no torch.compile (a smoke run)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32",
                   help="input dtype of the kernel-level groups (the model-level groups keep "
                        "fp32 parameters; see --precisions)")
    p.add_argument("--groups", default=None,
                   help="comma-separated groups to run (default: all kernel-level groups for "
                        "the device); cpu: cpu-mixers,cpu-scans; cuda: gpu-scans,gpu-huge,"
                        "gpu-fused,gpu-delta,gpu-mixers,gpu-memory; model-level, any device, "
                        "only when named: mixers,train-step,host")
    p.add_argument("--ops", default=None,
                   help="comma-separated op or mixer names: run only the cases whose name "
                        "contains one of them (default: every case of the groups)")
    p.add_argument("--backends", default=None,
                   help="comma-separated backends (default: all that can run): "
                        "loop,eager,compile,triton,jax,jax-triton,accelerated_scan,fla; the "
                        "model-level groups also know auto, compile(eager), compile(triton), "
                        "compile(reduce-overhead) (or compile-eager, compile-triton, "
                        "compile-ro; 'compile' selects every compile variant there), and "
                        "train-step's CUDA-graph rows compile-ro-eager, compile-ro-triton "
                        "(only when named)")
    p.add_argument("--shapes", default=None,
                   help="model-level groups: keep the sizes whose name or label contains one "
                        "of these (mixers: long,wide; train-step: small,medium; or e.g. d256); "
                        "gpu-delta: one word of the label, e.g. d64 or T1024")
    p.add_argument("--precisions", default=None,
                   help="mixers group: fp32,bf16 (bf16 = torch.autocast bfloat16 over fp32 "
                        "parameters; default both)")
    p.add_argument("--profile-steps", type=int, default=2,
                   help="train-step group: steps run under torch.profiler for each row's "
                        "time breakdown (default 2; 0 = no profile)")
    p.add_argument("--backward-in-thread", action="store_true",
                   help="train-step group: run each step's backward on the calling thread "
                        "(torch.autograd.set_multithreading_enabled(False)) instead of the "
                        "autograd engine's device thread, which costs host time per backward")
    p.add_argument("--timer", choices=("events", "wall", "loop"), default="events",
                   help="on CUDA: 'events' times PyTorch with triton.testing.do_bench (JAX is "
                        "always timed by wall clock); 'wall' times every backend by wall clock "
                        "with a device sync per call, so PyTorch and JAX rows compare directly; "
                        "'loop' times every backend by wall clock over calls issued back to "
                        "back with one sync per round (throughput: the host overlaps the GPU, "
                        "as in a training loop); kernel and mixer groups")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed repeats for wall-clock timing (median)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls on CPU")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's default)")
    p.add_argument("--out", default="mingru-bench",
                   help="directory for bench.json, bench.md and bench.png (default ./mingru-bench)")
