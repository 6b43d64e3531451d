"""The python examples of the site's tutorial and guides, read from their Markdown.

A page's fenced ``python`` blocks form one program, run in order from the top of
the page. An HTML comment on the line just above a fence changes that:

- ``<!-- example: fragment -->`` (a reason may follow): shown, not run; for the
  few blocks that need what a page cannot give (a web server, a Django project);
- ``<!-- example: new -->``: starts another program on the same page.

A block that only includes a file (``--8<-- "examples/..."``) is not part of any
program: the file is run where it lives (tests/acceptance/test_examples.py,
test_tutorial.py, test_web_examples.py, tests/django).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PAGES", "Block", "Program", "programs_of"]

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: The pages whose examples must run: the tutorial and every guide.
PAGES = [ROOT / "README.md", DOCS / "tutorial.md", *sorted((DOCS / "guides").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,})(?P<info>[^`\n]*)$")
_MARK = re.compile(r"^\s*<!--\s*example:\s*(?P<mark>fragment|new)\b.*-->\s*$")
_INCLUDE = re.compile(r'^\s*--8<--\s+"[^"]+"\s*$')


@dataclass(frozen=True)
class Block:
    """One fenced python block: where it starts on its page, and its code."""

    line: int
    code: str
    mark: str | None


@dataclass
class Program:
    """The runnable blocks of one page (or of one part of it), in page order."""

    page: Path
    number: int
    blocks: list[Block] = field(default_factory=list)

    @property
    def name(self) -> str:
        """``guides_tasks_1``: unique across pages, and a valid module name for mypy."""
        where = _shown(self.page, DOCS).with_suffix("").as_posix()
        return re.sub(r"\W", "_", f"{where}_{self.number}")

    @property
    def source(self) -> str:
        page = _shown(self.page, ROOT).as_posix()
        parts = [f"# {page}, line {block.line}\n{block.code}" for block in self.blocks]
        return "\n\n".join(parts) + "\n"


def _shown(page: Path, base: Path) -> Path:
    return page.relative_to(base) if page.is_relative_to(base) else Path(page.name)


def blocks_of(text: str) -> list[Block]:
    """Every fenced ``python`` block of a Markdown text, with the mark just above it."""
    lines = text.split("\n")
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if opening is None:
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        while index < len(lines) and not lines[index].strip().startswith(fence):
            body.append(lines[index][indent:])
            index += 1
        index += 1  # the closing fence
        if opening["info"].strip().split(" ")[0] != "python":
            continue
        start = index - len(body) - 1
        above = _above(lines, start - 1)
        mark = _MARK.match(above)
        found.append(Block(line=start, code="\n".join(body), mark=mark["mark"] if mark else None))
    return found


def _above(lines: list[str], fence_index: int) -> str:
    """The nearest non-blank line above the fence at ``fence_index``."""
    for index in range(fence_index - 1, -1, -1):
        if lines[index].strip():
            return lines[index]
    return ""


def programs_of(page: Path) -> list[Program]:
    """The programs of one page (none when every block is a fragment or an include)."""
    programs = [Program(page, 1)]
    for block in blocks_of(page.read_text()):
        if block.mark == "fragment" or all(
            _INCLUDE.match(line) for line in block.code.splitlines() if line.strip()
        ):
            continue
        if block.mark == "new" and programs[-1].blocks:
            programs.append(Program(page, len(programs) + 1))
        programs[-1].blocks.append(block)
    return [program for program in programs if program.blocks]
