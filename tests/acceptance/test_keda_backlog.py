"""The backlog for autoscalers: ``venturi stats --backlog`` and the query of the KEDA page.

The ``ScaledObject`` in docs/operations/keda.md is parsed, its PostgreSQL
trigger's query taken as written (prefix ``venturi``), the test prefix put in
its place, and run against a prefix holding due, scheduled, running and
finished jobs: it must return the due pending ones, as ``stats --backlog``
prints (ADR 0136).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import Run, failed_with, succeeded

import venturi
from venturi.types import Status

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "keda.md"


def scaled_object() -> dict[str, Any]:
    blocks = re.findall(r"```yaml\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    documents = [yaml.safe_load(block) for block in blocks]
    [found] = [d for d in documents if d.get("kind") == "ScaledObject"]
    return found


def keda_query(prefix: str) -> str:
    [trigger] = scaled_object()["spec"]["triggers"]
    assert trigger["type"] == "postgresql"
    query: str = trigger["metadata"]["query"]
    assert re.search(r"\bventuri_jobs\b", query), query
    return re.sub(r"\bventuri_jobs\b", f"{prefix}_jobs", query)


@pytest.fixture
def queue(app: venturi.App, db: Any) -> None:
    """Due jobs: 3 of ``keda.a``, 1 of ``keda.b``; beside them a scheduled job of each
    kind, one running (claimed) and one completed, none of which is backlog."""

    @app.task(kind="keda.a")
    def a() -> None: ...

    @app.task(kind="keda.b")
    def b() -> None: ...

    for _ in range(3):
        a.delay()
    b.delay()
    a.apply_async(countdown=3600)
    b.apply_async(countdown=3600)
    running, done = b.delay(), a.delay()
    db.execute(
        "UPDATE {{prefix}}_jobs SET status = 'claimed', claimed_by = 'w', run_count = 1,"
        " claim_expires_at = now() + interval '5 minutes' WHERE id = %s",
        (running.id,),
    )
    db.execute(
        "UPDATE {{prefix}}_jobs SET status = 'completed', run_count = 1, finished_at = now()"
        " WHERE id = %s",
        (done.id,),
    )
    counts = {row["status"]: row["n"] for row in db.all(
        "SELECT status, count(*) AS n FROM {{prefix}}_jobs GROUP BY status"
    )}
    assert counts == {Status.PENDING.value: 6, "claimed": 1, "completed": 1}


@pytest.mark.usefixtures("queue")
def test_the_keda_pages_query_returns_the_backlog_of_a_real_prefix(db: Any, prefix: str) -> None:
    assert db.conn.execute(keda_query(prefix)).fetchone() == {"count": 4}


@pytest.mark.usefixtures("queue")
def test_stats_backlog_prints_one_integer_for_every_kind_or_one(venturi_cli: Run) -> None:
    assert succeeded(venturi_cli("stats", "--backlog")) == "4\n"
    assert succeeded(venturi_cli("stats", "--backlog", "--kind", "keda.a")) == "3\n"
    assert succeeded(venturi_cli("stats", "--backlog", "--kind", "keda.b")) == "1\n"
    assert succeeded(venturi_cli("stats", "--backlog", "--kind", "keda.none")) == "0\n"


@pytest.mark.parametrize(
    "args", [("--kind", "keda.a"), ("--backlog", "--json")], ids=["kind-alone", "json"]
)
def test_kind_without_backlog_and_backlog_with_json_are_usage_errors(
    venturi_cli: Run, args: tuple[str, ...]
) -> None:
    assert "(see venturi stats --help)" in failed_with(venturi_cli("stats", *args), 2)


def test_the_scaled_object_scales_the_worker_deployment_of_deploy() -> None:
    spec = scaled_object()["spec"]
    assert spec["scaleTargetRef"]["name"] == "venturi-worker"
    assert int(spec["triggers"][0]["metadata"]["targetQueryValue"]) > 0
