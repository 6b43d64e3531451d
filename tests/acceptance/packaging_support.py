"""Building venturi's distributions and installing one into a fresh virtual environment
outside the checkout, for the wheel check and the rolling-upgrade test (ADR 0140).

A build runs ``python -m build`` (an sdist, then the wheel from that sdist, so both
are checked). An environment gets the wheel with ``--no-deps`` and then the runtime
dependencies the wheel declares, from the index (pip's cache serves repeats).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

__all__ = [
    "Build",
    "Installed",
    "Previous",
    "build",
    "clean_env",
    "export",
    "install",
    "newest_schema",
    "previous_release",
]

#: Hang guards for a build and an install, not speed checks.
BUILD_TIMEOUT = 600
INSTALL_TIMEOUT = 600


@dataclass(frozen=True)
class Build:
    wheel: Path
    sdist: Path

    def names(self) -> set[str]:
        with zipfile.ZipFile(self.wheel) as archive:
            return set(archive.namelist())

    def runtime_requirements(self) -> list[str]:
        """The wheel's ``Requires-Dist`` lines that no extra selects."""
        with zipfile.ZipFile(self.wheel) as archive:
            [metadata] = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            message = Parser().parsestr(archive.read(metadata).decode())
        return [r for r in message.get_all("Requires-Dist") or [] if "extra ==" not in r]


@dataclass(frozen=True)
class Installed:
    """A virtual environment with venturi installed from a wheel."""

    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def venturi(self) -> Path:
        return self.root / "bin" / "venturi"


def build(source: Path, out: Path) -> Build:
    """``python -m build`` of the project at ``source``: its sdist and wheel, in ``out``."""
    result = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(source)],
        cwd=out,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (wheel,) = out.glob("venturi-*.whl")
    (sdist,) = out.glob("venturi-*.tar.gz")
    return Build(wheel, sdist)


def install(distribution: Build, root: Path) -> Installed:
    """A fresh virtual environment at ``root`` with the wheel (not editable) and its deps."""
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    installed = Installed(root)
    pip = [str(installed.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    for arguments in (
        ["--no-deps", str(distribution.wheel)],
        distribution.runtime_requirements(),
    ):
        result = subprocess.run(
            [*pip, *arguments],
            cwd=root,
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT,
            check=False,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return installed


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without venturi's variables, PYTHONPATH or a venv's."""
    dropped = ("VENTURI_", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(PYTHONUNBUFFERED="1", PYTHONNOUSERSITE="1", **extra)
    return env


_VERSION = re.compile(r"^V(\d+)__.+\.sql$")


@dataclass(frozen=True)
class Previous:
    """The build a rolling upgrade starts from: a commit, how it was chosen, and the
    newest migration version it ships."""

    commit: str
    why: str
    schema: int


def previous_release(root: Path) -> Previous:
    """The previous release's commit, derived from git (never written down):

    the newest release tag (``v*``) reachable from ``HEAD``'s parent, when there is
    one (a ``HEAD`` that carries the tag itself is that release, not its previous);
    otherwise the commit where the previous migration was the latest: the first
    parent of the commit that added the newest file in ``migrations/``.
    """
    tag = _git(root, "tag", "--merged", "HEAD~1", "--sort=-v:refname", "--list", "v[0-9]*")
    if tag.strip():
        name = tag.split()[0]
        commit = _git(root, "rev-list", "-n", "1", name).strip()
        return Previous(commit, f"tag {name}", _schema_of(root, commit))
    newest = max((p.name for p in (root / "migrations").glob("V*.sql")), key=_version)
    # --no-renames: a file renamed into its final name was "added" by that rename.
    added = _git(
        root, "log", "--no-renames", "--diff-filter=A", "--format=%H", "--", f"migrations/{newest}"
    )
    if not added.strip():
        raise AssertionError(f"git has no commit that added migrations/{newest}")
    commit = _git(root, "rev-parse", f"{added.split()[-1]}^1").strip()
    return Previous(
        commit, f"the parent of the commit that added {newest}", _schema_of(root, commit)
    )


def newest_schema(root: Path) -> int:
    """The newest migration version in the checkout."""
    return max(_version(p.name) for p in (root / "migrations").glob("V*.sql"))


def export(root: Path, commit: str, out: Path) -> Path:
    """``git archive`` of ``commit`` unpacked into ``out``: a source tree to build."""
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", "--format=tar", commit],
        capture_output=True,
        timeout=BUILD_TIMEOUT,
        check=True,
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(out, filter="data")
    return out


def _schema_of(root: Path, commit: str) -> int:
    names = _git(root, "ls-tree", "--name-only", commit, "migrations/").split()
    return max(_version(Path(name).name) for name in names if _VERSION.match(Path(name).name))


def _version(name: str) -> int:
    match = _VERSION.match(name)
    assert match is not None, f"not a migration file name: {name}"
    return int(match[1])


def _git(root: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", "-C", str(root), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr.strip()}"
    return result.stdout
