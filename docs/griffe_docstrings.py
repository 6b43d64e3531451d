"""A griffe extension that reads venturi's docstring conventions as Google-style Markdown.

venturi's docstrings list a constructor's keyword arguments under ``Options:``
and introduce code with reST's ``Example::`` and an indented block.
mkdocstrings parses Google style with Markdown inside, where the first is
``Args:`` and the second a fenced block; this extension translates both at
load time, so the code keeps its own vocabulary and the API reference renders
the options as a parameter table and the examples as highlighted code.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

__all__ = ["VenturiDocstrings", "markdown_docstring"]

_OPTIONS = re.compile(r"^(\s*)Options:\s*$", re.MULTILINE)
#: Intros that Google style would take for a section header of their own.
_SECTION_WORDS = {"Example", "Examples"}


class VenturiDocstrings(Extension):
    """Rewrite every docstring with ``markdown_docstring`` before it is parsed."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)


def markdown_docstring(text: str) -> str:
    """``Options:`` becomes ``Args:``; each reST literal block becomes a fenced python block."""
    lines = _OPTIONS.sub(r"\1Args:", text).split("\n")
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index].rstrip()
        index += 1
        if not line.endswith("::"):
            out.append(line)
            continue
        indent = _indent(line)
        intro = line[:-1].strip()
        if intro[:-1] in _SECTION_WORDS:
            intro = "For example:"
        start = index
        while index < len(lines) and (not lines[index].strip() or _indent(lines[index]) > indent):
            index += 1
        block = lines[start:index]
        while block and not block[-1].strip():
            block.pop()
        while block and not block[0].strip():
            block.pop(0)
        depth = min((_indent(code) for code in block if code.strip()), default=indent)
        pad = " " * indent
        out += [pad + intro, "", pad + "```python"]
        out += [pad + code[depth:] if code.strip() else "" for code in block]
        out += [pad + "```", ""]
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())
