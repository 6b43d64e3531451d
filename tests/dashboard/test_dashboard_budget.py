"""Database load is bounded by the interval, not by the number of viewers."""

from __future__ import annotations

import threading

import httpx2
import pytest
from dashboard_support import TOKEN, csrf_of
from support import wait_until

from venturi import chain
from venturi.dashboard import create_app
from venturi.dashboard.cache import SharedCache
from venturi.testing import drain


def counting(app, name: str) -> list[int]:
    """Counts calls to one App operation (the dashboard's only way to the database)."""
    calls: list[int] = []
    operation = getattr(app, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return operation(*args, **kwargs)

    setattr(app, name, counted)
    return calls


def test_many_concurrent_viewers_share_one_stats_query_per_interval(app, tasks, serve) -> None:
    tasks["send"].delay_many([{"to": f"u{i}"} for i in range(10)])
    done = tasks["send"].delay("done@example.org")
    drain(app, ["mail.send"])
    flow = chain(tasks["send"].si("a@example.org"), tasks["send"].si("b@example.org")).delay()
    stats_calls = counting(app, "stats")
    chart_calls = counting(app, "throughput")
    listing_calls = counting(app, "job_summaries")
    registry_calls = counting(app, "workers")
    unserved_calls = counting(app, "unserved_kinds")
    beat_calls = counting(app, "active_beat")
    result_calls = counting(app, "result")
    workflows_calls = counting(app, "workflows")
    workflow_calls = counting(app, "workflow")
    workflow_of_calls = counting(app, "workflow_of")
    served = serve(create_app(app, token=TOKEN, live_interval=60))
    viewers, refreshes = 8, 5
    start = threading.Barrier(viewers)
    failures: list[str] = []

    def viewer() -> None:
        with httpx2.Client(base_url=served.url, timeout=30) as client:
            login = client.get("/login").text  # reads need sign-in: each viewer signs in
            signed = client.post(
                "/login",
                data={"csrf": csrf_of(login), "token": TOKEN},
                headers={"origin": served.url},
            )
            if signed.status_code != 303:
                failures.append(f"sign-in: {signed.status_code}")
            start.wait()
            for _ in range(refreshes):
                for path in (
                    "/",
                    "/jobs",
                    "/workers",
                    "/schedules",
                    f"/jobs/{done.id}",
                    "/workflows",
                    f"/workflows/{flow.id}",
                ):
                    answer = client.get(path, headers={"x-venturi-live": "1"})
                    if answer.status_code != 200:
                        failures.append(f"{path}: {answer.status_code}")

    threads = [threading.Thread(target=viewer) for _ in range(viewers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert failures == []
    # 8 viewers x 5 refreshes x 7 pages = 280 page views within one interval
    assert len(stats_calls) == 1
    assert len(chart_calls) == 1
    assert len(listing_calls) == 1
    assert len(registry_calls) == 1
    assert len(unserved_calls) == 1
    assert len(beat_calls) == 1
    assert len(result_calls) == 1
    assert len(workflows_calls) == 1
    assert len(workflow_calls) == 1
    assert len(workflow_of_calls) == 1


def test_the_shared_cache_loads_once_per_key_and_interval() -> None:
    now = [0.0]
    cache = SharedCache(2.0, clock=lambda: now[0])
    loads: list[str] = []

    def load(name: str):
        return lambda: loads.append(name) or len(loads)

    assert [cache.get("stats", load("stats")) for _ in range(50)] == [1] * 50
    now[0] = 1.99
    assert cache.get("stats", load("stats")) == 1
    assert cache.get(("jobs", "dead"), load("jobs")) == 2
    now[0] = 2.0
    assert cache.get("stats", load("stats")) == 3
    cache.clear()
    assert cache.get("stats", load("stats")) == 4
    assert loads == ["stats", "jobs", "stats", "stats"]


def test_concurrent_misses_wait_for_the_one_load_in_flight() -> None:
    cache = SharedCache(60.0)
    release = threading.Event()
    loads: list[int] = []

    def slow() -> int:
        loads.append(1)
        release.wait(10)
        return 42

    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get("stats", slow))) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    wait_until(lambda: loads)
    release.set()
    for thread in threads:
        thread.join(timeout=10)
    assert results == [42] * 6
    assert loads == [1]


def test_a_failed_load_is_not_cached() -> None:
    cache = SharedCache(60.0)

    def broken() -> int:
        raise RuntimeError("database down")

    for _ in range(2):
        with pytest.raises(RuntimeError):
            cache.get("stats", broken)
    assert cache.get("stats", lambda: 7) == 7
