"""Griffe extension for the docs build: read a Google-style ``Example:`` section as
``Examples:`` so its ``>>>`` lines render as Python code (griffe only knows the plural; the
singular would become an admonition whose code is parsed as Markdown)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        doc = obj.docstring
        if doc is not None and "Example:" in doc.value:
            doc.value = _EXAMPLE.sub(r"\1Examples:", doc.value)
