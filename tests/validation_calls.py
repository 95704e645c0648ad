"""Which arguments one public call validates, and where: the recorder behind both frontends'
``test_validate_once.py``. Framework-free (no torch, no jax import).

A *validator* is a function of a checking module (``_validate``, the shared
``mingru_kernels._checks``, ``mixers/_common``'s ``check_*``, ``mingru_kernels._spec``'s
``check_*``, ``check_cu_seqlens``, ``check_group`` / ``check_axis``), wherever its caller
imported it from: calls are caught with :func:`sys.setprofile`, by the file and name of the
code that runs, not by patching names.
Each call is recorded as the arguments it validates, ``(name, object)``, at its *site*: the
nearest calling function outside the checking modules (a mixer's ``forward``, a cell's
``_check_cell``, ...). An argument validated once is validated at one site; the NaN check of
initial states (a value check, once per public call) is counted apart, as ``value_checks``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

# (file suffix, function-name filter): the checking modules of both frontends and the kernels.
_CHECKING = (
    ("/_validate.py", lambda name: True),
    ("/kernels/_checks.py", lambda name: True),
    ("/mixers/_common.py", lambda name: name.startswith("check")),
    ("/kernels/_spec.py", lambda name: name.startswith("check")),
    ("/_packing.py", lambda name: name.startswith("check")),
    ("/_packed_sharding.py", lambda name: name == "row_length"),
    ("/_sharding.py", lambda name: name.startswith("check")),
)
# The value check of initial states and the wrappers that run it.
_VALUE_CHECKS = {"no_nan", "check_states", "checked_call", "call"}


def _in_checking_module(code: CodeType) -> bool:
    path = code.co_filename.replace("\\", "/")
    return any(path.endswith(suffix) and accept(code.co_name) for suffix, accept in _CHECKING)


def _validated(name: str, args: dict[str, Any]) -> list[tuple[str, Any]]:
    """The ``(name, object)`` pairs a validator call with these local arguments checks."""
    if name in ("same_kind", "same_dtype"):
        return list(args.get("tensors", args.get("arrays", ())))
    if name == "check_cell_shapes":
        return [(n, args[n]) for n in ("k", "initial_state", "log_gamma") if args[n] is not None]
    if name == "check_delta_rule_shapes":
        return [(n, args[n]) for n in ("q", "k", "v", "beta", "log_gamma", "h0")
                if args[n] is not None]
    if name == "check_stack_state":
        return [("state", args["state"])]
    if name == "check_cu_seqlens_values":
        return [(args.get("name", "cu_seqlens"), args["offsets"])]
    if name == "row_length":
        return [] if args["axis_name"] is None else [("axis_name", args["axis_name"])]
    if "name" in args:
        first = next(iter(args.values()))
        if first is None:  # an optional argument that was not given: nothing checked
            return []
        return [(args["name"], first)]
    return []


@dataclass
class Validations:
    """What one call validated: ``records`` of ``(site, name, object)`` and the value checks."""

    records: list[tuple[CodeType, str, Any]] = field(default_factory=list)
    value_checks: Counter = field(default_factory=Counter)

    def sites_per_name(self) -> dict[str, int]:
        """For each argument name, at how many sites it was validated."""
        sites: dict[str, set[CodeType]] = {}
        for site, name, _ in self.records:
            sites.setdefault(name, set()).add(site)
        return {name: len(where) for name, where in sites.items()}

    def sites_of(self, obj: Any) -> int:
        """At how many sites the very object ``obj`` (a caller's argument) was validated."""
        return len({site for site, _, o in self.records if o is obj})

    def names(self) -> set[str]:
        return {name for _, name, _ in self.records}


def _site(frame: FrameType | None) -> CodeType | None:
    while frame is not None and _in_checking_module(frame.f_code):
        frame = frame.f_back
    return None if frame is None else frame.f_code


@contextmanager
def recording() -> Iterator[Validations]:
    """Record the validations made inside the block (this thread)."""
    seen = Validations()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not _in_checking_module(frame.f_code):
            return
        name = frame.f_code.co_name
        if name in _VALUE_CHECKS:
            seen.value_checks[name] += 1
            return
        args = {n: frame.f_locals[n] for n in
                frame.f_code.co_varnames[:frame.f_code.co_argcount + frame.f_code.co_kwonlyargcount]}
        site = _site(frame.f_back)
        for arg_name, obj in _validated(name, args):
            seen.records.append((site, arg_name, obj))

    previous: Callable | None = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
