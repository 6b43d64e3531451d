"""The storage interface by role: ``Backend`` is the union of the role Protocols, each
member in exactly one role, and the PostgreSQL adapter satisfies each role.

Static conformance: mypy (strict) verifies ``_backend_check: type[Backend] =
PostgresBackend`` and one such check per role (conftest.py). ``mypy venturi`` does not
see the tests, so this runs mypy on the contract suite (the tests' calls are checked
against the protocols too), beside a class that implements one role only, which it
must flag against the others and against ``Backend`` (so a check that silently
stopped checking would fail here).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Protocol

import pytest
from mypy import api

from venturi import backend as storage
from venturi.backend import Backend
from venturi.postgres import PostgresBackend

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "tests" / "contract"
BROKEN = """\
from venturi.backend import Backend, Listener, Results, Workers
from venturi.types import StoredResult


class ResultsOnly:
    def read_result(self, job_id: str) -> StoredResult | None: ...
    def await_result(self, job_id: str) -> None: ...
    def listen_result(self, job_id: str) -> Listener:
        raise NotImplementedError


_results: type[Results] = ResultsOnly
_workers: type[Workers] = ResultsOnly
_backend: type[Backend] = ResultsOnly
"""
#: The roles, in the order of venturi/backend/ (and of queries.sql's sections).
ROLES = (
    storage.Enqueue,
    storage.Claims,
    storage.Leases,
    storage.Coordination,
    storage.Operator,
    storage.Workers,
    storage.Results,
    storage.Workflows,
    storage.Control,
    storage.Durable,
    storage.Schema,
    storage.Callbacks,
    storage.Keys,
)


def members(protocol: type) -> set[str]:
    """The public methods a Protocol declares in its own body."""
    return {
        name
        for name, value in vars(protocol).items()
        if inspect.isfunction(value) and not name.startswith("_")
    }


@pytest.mark.slow
def test_mypy_verifies_that_the_postgres_adapter_is_a_backend_and_each_role(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "results_only.py"
    broken.write_text(BROKEN)

    stdout, stderr, _ = api.run(
        [
            str(SUITE),
            str(broken),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "--no-error-summary",
            "--no-pretty",
        ]
    )

    assert stderr == ""
    errors = {
        (match.group(1), int(match.group(2)))
        for match in re.finditer(r"^(\S+?\.py):(\d+): error:", stdout, re.M)
    }
    assert errors == {(str(broken), 13), (str(broken), 14)}, stdout


def test_backend_is_the_union_of_the_roles_and_declares_nothing_of_its_own() -> None:
    assert Backend.__bases__ == (*ROLES, Protocol)
    assert members(Backend) == set()


def test_every_member_belongs_to_exactly_one_role() -> None:
    declared = [name for role in ROLES for name in members(role)]

    assert len(declared) == len(set(declared)), sorted(declared)


def test_the_postgres_adapter_has_every_member_of_every_role_with_its_parameters() -> None:
    for role in ROLES:
        for name in members(role):
            expected = inspect.signature(getattr(role, name)).parameters
            actual = inspect.signature(getattr(PostgresBackend, name)).parameters
            assert list(actual) == list(expected), f"{role.__name__}.{name}"
