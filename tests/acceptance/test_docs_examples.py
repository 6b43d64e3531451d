"""Every python example of the tutorial and the guides runs, and type-checks under mypy strict.

Each page's runnable blocks are one program (docs_examples.py says how a page
marks fragments), run in a subprocess on a database of its own through
``$VENTURI_DATABASE_URL``; it must exit 0. The same programs, the files under
examples/ and the tutorial's files are type-checked with the project's mypy
configuration (strict), as a user's code would be.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs_examples import PAGES, ROOT, Program, blocks_of, programs_of

PROGRAMS = [program for page in PAGES for program in programs_of(page)]
#: A hang guard for one page's program, not a speed assertion.
TIMEOUT = 120
#: Complete programs kept as files, type-checked beside the pages' programs.
EXAMPLE_FILES = sorted((ROOT / "examples").glob("*.py")) + sorted(
    (ROOT / "examples" / "tutorial").glob("*.py")
)


def run_program(
    program: Program, database_url: str, where: Path
) -> subprocess.CompletedProcess[str]:
    script = where / f"{program.name}.py"
    script.write_text(program.source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DATABASE_URL=database_url, PYTHONUNBUFFERED="1")
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def test_the_guides_have_examples_to_run() -> None:
    names = {program.page.name for program in PROGRAMS}
    assert "tasks.md" in names
    assert "testing.md" in names
    # Fragments stay few: most of what a page shows runs.
    blocks = [block for page in PAGES for block in blocks_of(page.read_text())]
    fragments = [block for block in blocks if block.mark == "fragment"]
    assert len(fragments) * 4 <= len(blocks), [(b.line, b.code[:40]) for b in fragments]


@pytest.mark.parametrize("program", PROGRAMS, ids=[program.name for program in PROGRAMS])
def test_page_example_runs(program: Program, example_database: str, tmp_path: Path) -> None:
    result = run_program(program, example_database, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_examples_type_check(tmp_path: Path) -> None:
    scripts = []
    for program in PROGRAMS:
        script = tmp_path / f"{program.name}.py"
        script.write_text(program.source)
        scripts.append(str(script))
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
        + scripts
        + [str(path) for path in EXAMPLE_FILES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------- the harness catches a break


PAGE = """# A page

```python
import venturi

app = venturi.App()
```

<!-- example: fragment (needs a web server) -->
```python
raise SystemExit("a fragment is never run")
```

```sh
echo a shell block is not python
```

```python
--8<-- "examples/quickstart.py"
```

<!-- example: new -->
```python
{second}
```
"""


def test_a_page_is_cut_into_programs(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE.format(second="print('second')"))
    first, second = programs_of(page)
    assert [block.line for block in first.blocks] == [3]
    assert "venturi.App()" in first.source
    assert "fragment" not in first.source + second.source
    assert second.source.endswith("print('second')\n")


def test_a_broken_example_fails(example_database: str, tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE.format(second="venturi.App().no_such_method()"))
    first, second = programs_of(page)
    assert run_program(first, example_database, tmp_path).returncode == 0
    broken = run_program(second, example_database, tmp_path)
    assert broken.returncode != 0
    assert "NameError" in broken.stderr  # the second program does not see the first's import
