"""The name a leadership session gives itself, and the holder read back from it (ADR 0131)."""

from __future__ import annotations

import os
import socket

import pytest

from venturi.postgres.leadership import (
    MAX_APPLICATION_NAME,
    leader_of_session,
    leader_session_name,
)


def test_the_name_carries_the_role_and_the_host_pid_of_this_process() -> None:
    name = leader_session_name("beat")
    assert name == f"venturi beat {socket.gethostname()}:{os.getpid()}"
    assert leader_of_session("beat", name) == f"{socket.gethostname()}:{os.getpid()}"


def test_a_long_host_name_loses_its_end_never_the_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "worker-" + "x" * 80 + ".cluster.local")
    name = leader_session_name("beat")
    assert len(name.encode()) <= MAX_APPLICATION_NAME
    holder = leader_of_session("beat", name)
    assert holder is not None
    assert holder.startswith("worker-xxx")
    assert holder.endswith(f":{os.getpid()}")


@pytest.mark.parametrize(
    "application_name", [None, "", "psql", "venturi pruner web-1:7", "venturi beat "]
)
def test_other_sessions_name_no_holder_of_the_role(application_name: str | None) -> None:
    assert leader_of_session("beat", application_name) is None
