"""Building venturi's distributions and installing one into a fresh virtual environment
outside the checkout, for the wheel check and the rolling-upgrade test (ADR 0140).

A build runs ``python -m build`` (an sdist, then the wheel from that sdist, so both
are checked). An environment gets the wheel with ``--no-deps`` and then the runtime
dependencies the wheel declares, from the index (pip's cache serves repeats).
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

__all__ = ["Build", "Installed", "build", "clean_env", "install"]

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
