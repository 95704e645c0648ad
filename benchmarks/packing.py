"""Packed sequences against the two ways users handle variable-length data without them.

A language model trained on documents of different lengths either pads them into a batch
(``(N, L_max)``, paying for the padding and masking the loss) or loops over them (one call per
document). With ``cu_seqlens`` the documents are laid end to end in ONE row and the
recurrence restarts at every boundary inside the scan. This times a ``MinGRUStack``
forward+backward the three ways on the same documents (median wall clock of ``--repeats``
calls after a warm-up, with a device sync on CUDA) and checks that they agree.

    python benchmarks/packing.py --device cpu --docs 32 --tokens 4096
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

import mingru


def lengths(n_docs: int, tokens: int, seed: int) -> list[int]:
    """``n_docs`` document lengths summing to ``tokens``, long-tailed (as real corpora)."""
    g = torch.Generator().manual_seed(seed)
    w = -torch.log(torch.rand(n_docs, generator=g))  # exponential weights
    raw = (w / w.sum() * tokens).floor().long().clamp_min(1)
    raw[0] += tokens - int(raw.sum())
    return raw.tolist()


def timed(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(out)


def measure(mixer: str, args: argparse.Namespace, device: torch.device, lens: list[int],
            cu: torch.Tensor) -> dict:
    """One mixer's three timings and their agreement."""
    torch.manual_seed(0)
    model = mingru.MinGRUStack(args.d_model, args.d_model, args.layers, mixer=mixer).to(device)
    x = torch.randn(1, args.tokens, args.d_model, device=device)
    docs = list(torch.split(x, lens, dim=1))
    L = max(lens)
    padded = torch.zeros(len(lens), L, args.d_model, device=device)
    mask = torch.zeros(len(lens), L, 1, device=device)
    for i, d in enumerate(docs):
        padded[i, : d.shape[1]] = d[0]
        mask[i, : d.shape[1]] = 1.0

    def packed():
        out, _ = model(x, cu_seqlens=cu)
        out.square().mean().backward()

    def padded_batch():
        out, _ = model(padded)
        ((out.square() * mask).sum() / (mask.sum() * args.d_model)).backward()

    def loop():
        loss = sum(model(d)[0].square().sum() for d in docs) / (args.tokens * args.d_model)
        loss.backward()

    with torch.no_grad():  # the three agree (the padding sits after each document)
        ref = torch.cat([model(d)[0] for d in docs], dim=1)
        got = model(x, cu_seqlens=cu)[0]
        pad = torch.cat([model(padded)[0][i : i + 1, :n] for i, n in enumerate(lens)], 1)
    err = max(float((got - ref).abs().max()), float((pad - ref).abs().max()))
    row = dict(mixer=mixer, packed_ms=timed(packed, args.repeats, device),
               padded_ms=timed(padded_batch, args.repeats, device),
               loop_ms=timed(loop, args.repeats, device), padded_tokens=len(lens) * L,
               max_abs_diff=err)
    print(f"{mixer:<7} packed {row['packed_ms']:8.1f} ms   padded {row['padded_ms']:8.1f} ms "
          f"({row['padded_tokens']} tokens)   loop {row['loop_ms']:8.1f} ms   "
          f"max |diff| {err:.1e}", flush=True)
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--docs", type=int, default=32)
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--mixers", default="log,signed")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    device = torch.device(args.device)
    lens = lengths(args.docs, args.tokens, seed=0)
    cu = torch.tensor([0, *torch.cumsum(torch.tensor(lens), 0).tolist()], device=device)
    rows = [measure(mixer, args, device, lens, cu) for mixer in args.mixers.split(",")]
    meta = dict(device=str(device), docs=args.docs, tokens=args.tokens, d_model=args.d_model,
                layers=args.layers, torch=torch.__version__, python=platform.python_version(),
                cpu=platform.processor() or platform.machine(), threads=torch.get_num_threads())
    print(json.dumps(meta))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(meta=meta, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
