"""Spawning gloo process groups for the distributed tests (sequence parallel, packed and
sharded, data × sequence parallel): one place for the rendezvous, the per-rank logs, the
watchdog, failure reporting and the teardown.

A test calls ``spawn(worker, world, tmp_path, *args)``; the worker is
``worker(rank, world, init, errors, *args)`` and runs its checks inside
``with rank_process(rank, world, init, errors):``. An exception there is reported (the test
fails with every rank's traceback) instead of killing the rank.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["rank_process", "spawn"]


@contextlib.contextmanager
def rank_process(rank: int, world: int, init: str, errors: Any) -> Iterator[None]:
    """Inside a spawned rank: stderr to ``<rendezvous>.<rank>.log``, a watchdog (a collective
    that never matches ends the rank with its traceback instead of hanging CI), the gloo group,
    and any failure put on ``errors``."""
    log = open(f"{init.removeprefix('file://')}.{rank}.log", "w")  # noqa: SIM115
    os.dup2(log.fileno(), 2)
    faulthandler.dump_traceback_later(180, exit=True)
    try:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=90))
        yield
    except Exception:
        errors.put(f"rank {rank} of {world}: {traceback.format_exc()}")
    finally:
        if dist.is_initialized():
            dist.barrier()  # no rank tears the group down while another still talks to it
            dist.destroy_process_group()
        log.close()
        # Leave without C++ static destructors: at interpreter exit a gloo or intra-op thread
        # still joinable aborts the process now and then ("terminate called without an active
        # exception"), after every check has passed. Results are already reported.
        os._exit(0)


def spawn(worker: Callable[..., None], world: int, tmp_path: Any, *args: Any) -> None:
    """Run ``worker(rank, world, init, errors, *args)`` on ``world`` spawned processes and fail
    with every reported error (or the ranks' logs, if a rank died)."""
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    init = f"file://{tmp_path}/rendezvous"
    try:
        mp.spawn(worker, args=(world, init, errors, *args), nprocs=world, join=True)
    except mp.ProcessExitedException as exc:
        logs = "\n".join(p.read_text()[-2000:] for p in sorted(tmp_path.glob("rendezvous.*.log")))
        raise AssertionError(f"{exc}\n{logs}") from exc
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, "\n".join(failures)
