"""mkdocs hooks: the pages the site derives from the code and the repository at build time.

- ``reference/cli.md`` is written from ``venturi.cli.build_parser()``: every
  command, its usage and its options, so a new command or flag appears with no
  prose to edit;
- ``bench/README.md`` and ``bench/JOURNAL.md`` are published as
  ``benchmarks/README.md`` and ``benchmarks/JOURNAL.md`` (figures live once, in
  bench/), and a page's link to either file in the repository is pointed at its
  published copy;
- every ``docs/adr/0*.md`` is appended to the "Decisions (ADRs)" section of the
  navigation in number order, so a new ADR needs no edit of mkdocs.yml.
"""

from __future__ import annotations

import argparse
import posixpath
import re
from collections.abc import Iterator
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

from venturi.cli import build_parser

__all__ = ["cli_reference", "on_config", "on_files", "on_page_markdown"]

ROOT = Path(__file__).resolve().parent.parent
CLI_PAGE = "reference/cli.md"
#: Repository files published as pages: repository path -> path inside the site.
PUBLISHED = {
    "bench/README.md": "benchmarks/README.md",
    "bench/JOURNAL.md": "benchmarks/JOURNAL.md",
}
ADR_SECTION = "Decisions (ADRs)"
_LINK = re.compile(r"\]\(([^)\s#]+)(#[^)\s]*)?\)")


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    """Append every ADR to the ADR section of the navigation, in number order."""
    adrs = sorted(path.name for path in (Path(config.docs_dir) / "adr").glob("0*.md"))
    for entry in config.nav or []:
        if isinstance(entry, dict) and ADR_SECTION in entry:
            entry[ADR_SECTION].extend(f"adr/{name}" for name in adrs)
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated CLI reference and the published benchmark pages."""
    files.append(File.generated(config, CLI_PAGE, content=cli_reference(build_parser())))
    for source, target in PUBLISHED.items():
        files.append(File.generated(config, target, abs_src_path=str(ROOT / source)))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Point links to a published repository file (``../../bench/README.md``) at its page."""
    if page.file.generated_by is not None:
        return markdown
    docs = Path(config.docs_dir).resolve().relative_to(ROOT).as_posix()
    here = posixpath.dirname(f"{docs}/{page.file.src_uri}")

    def published(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(here, match.group(1)))
        if target not in PUBLISHED:
            return match.group(0)
        site_target = posixpath.relpath(PUBLISHED[target], posixpath.dirname(page.file.src_uri))
        return f"]({site_target}{match.group(2) or ''})"

    return _LINK.sub(published, markdown)


# ------------------------------------------------------------------ the CLI page


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """The command-line reference as Markdown, from the parser alone."""
    shared = {option for action in parser._actions for option in action.option_strings}
    lines = [
        "# Command line",
        "",
        "<!-- Generated at build time from venturi.cli.build_parser() by docs/hooks.py. -->",
        "",
        parser.description or "",
        "",
        "```text",
        parser.format_usage().strip(),
        "```",
        "",
        parser.epilog or "",
        "",
        "## Options every command takes",
        "",
        "They may stand before or after the command's name "
        "(`venturi --app myproj.jobs:app worker` or `venturi worker --app myproj.jobs:app`).",
        "",
        *_options_table(parser._actions),
        "",
        "## Commands",
        "",
        "| command | what it does |",
        "| --- | --- |",
    ]
    commands = list(_commands(parser))
    for command, sub in commands:
        lines.append(f"| [`{command}`](#{_anchor(command)}) | {_cell(sub.description or '')} |")
    for command, sub in commands:
        own = [action for action in sub._actions if not set(action.option_strings) & shared]
        lines += ["", f"## {command}", "", sub.description or "", ""]
        lines += ["```text", sub.format_usage().strip(), "```", ""]
        if any(not isinstance(action, argparse._SubParsersAction) for action in own):
            lines += _options_table(own)
    return "\n".join(lines) + "\n"


def _commands(
    parser: argparse.ArgumentParser, words: tuple[str, ...] = ("venturi",)
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command below ``parser``, depth first in the order the parser lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                path = (*words, name)
                yield " ".join(path), sub
                yield from _commands(sub, path)


def _options_table(actions: list[argparse.Action]) -> list[str]:
    rows = [
        f"| {_cell(_invocation(action))} | {_cell(_help(action))} |"
        for action in actions
        if action.help != argparse.SUPPRESS
        and not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
    ]
    return ["| option | what it does |", "| --- | --- |", *rows] if rows else []


def _invocation(action: argparse.Action) -> str:
    """``--limit N``, ``-v, --verbose`` or ``ID``: the option as it is typed."""
    value = _metavar(action)
    if not action.option_strings:
        return f"`{value}`"
    forms = ", ".join(f"`{option}`" for option in action.option_strings)
    return f"{forms} `{value}`" if action.nargs != 0 else forms


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:  # argparse's own expansion of %(default)s and friends
        text = text % {**vars(action), "prog": ""}
    return text


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(command: str) -> str:
    """The id mkdocs' toc extension gives the heading ``## venturi jobs list``."""
    return command.replace(" ", "-")

