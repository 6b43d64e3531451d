"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a
real uvicorn server. Screenshots of every page go to the artifact directory."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_support import TOKEN, dead_job, seed, traceback_text
from support import wait_until

from venturi import chain, chord
from venturi.beat import Beat
from venturi.dashboard import create_app
from venturi.testing import drain

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = Path(os.environ.get("VENTURI_ARTIFACTS") or Path(__file__).parent / "artifacts")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        message = (
            f"browser tests need Debian's chromium at {CHROMIUM} "
            "(apt-get install -y chromium); .ci/run installs it"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield launched
        launched.close()


@pytest.fixture
def problems() -> list[str]:
    """Errors the page logged; a test that expects one (a refused form's 400) removes it."""
    return []


@pytest.fixture
def stranger(browser, url: str, problems: list[str]) -> Iterator[Any]:
    """A fresh browser context, not signed in; it closes before the server (``url``) stops."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    opened = context.new_page()
    opened.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    opened.on("pageerror", lambda e: problems.append(str(e)))
    yield opened
    context.close()
    assert problems == [], "the page logged errors (a CSP refusal shows here too)"


@pytest.fixture
def page(stranger, url: str) -> Any:
    """A browser signed in with the token: with one, reading needs the sign-in too.

    It lands on the enqueue form, which reads nothing from the database, so no read
    is in the shared cache before the test writes its rows.
    """
    sign_in(stranger, url, then="/enqueue")
    return stranger


@pytest.fixture
def url(app, tasks, serve) -> str:
    return serve(create_app(app, token=TOKEN, live_interval=0.5)).url


def screenshot(page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)


def sign_in(page, url: str, then: str = "") -> None:
    page.goto(f"{url}/login?next={then}" if then else f"{url}/login")
    page.fill("input[name=token]", TOKEN)
    page.click("#sign-in")
    page.wait_for_selector("text=Signed in: changes are allowed")


def test_a_stranger_signs_in_first_and_lands_on_the_page_asked_for(stranger, url, app, db, tasks):
    job_id = dead_job(app, db, tasks["send"], note="SMTPServerDisconnected: connection lost")
    stranger.goto(f"{url}/jobs/{job_id}")
    stranger.wait_for_selector("text=Sign in with the dashboard's token to read it.")
    assert stranger.locator("nav a").count() == 0
    assert "connection lost" not in stranger.content()
    screenshot(stranger, "sign-in.png")
    stranger.fill("input[name=token]", TOKEN)
    stranger.click("#sign-in")
    stranger.wait_for_selector("text=Signed in: changes are allowed")
    assert stranger.url == f"{url}/jobs/{job_id}?notice=signed-in"
    assert stranger.locator("h1").inner_text() == job_id
    assert "connection lost" in stranger.content()


def test_a_page_signed_out_meanwhile_goes_to_the_sign_in(page, url, problems) -> None:
    page.goto(f"{url}/jobs")
    page.wait_for_selector("#live-status.ok")
    page.context.clear_cookies()  # as when the token changes: every session is signed out
    page.wait_for_selector("text=Sign in with the dashboard's token to read it.", timeout=15000)
    assert page.url.startswith(f"{url}/login?next=%2Fjobs")
    assert problems == [
        "Failed to load resource: the server responded with a status of 401 (Unauthorized)"
    ]
    problems.clear()


def test_overview_renders_counts_chart_and_the_unserved_kind(page, url, app, db, tasks) -> None:
    seed(app, db, tasks)
    page.goto(url)
    page.wait_for_selector("h2:has-text('Kinds')")
    kinds = page.locator("table.grid tbody tr td:first-child code").all_inner_texts()
    assert {"mail.send", "reports.nightly", "billing.invoice"} <= set(kinds)
    assert page.locator("svg.chart.large rect.ok").count() > 10
    assert page.locator("tr.flagged code").inner_text() == "billing.invoice"
    assert page.locator(".card.c-completed .card-value").inner_text() == "90"
    page.wait_for_selector("#live-status.ok")
    screenshot(page, "overview.png")


def test_a_click_on_a_job_opens_its_timeline(page, url, app, db, tasks) -> None:
    seed(app, db, tasks)
    job_id = dead_job(app, db, tasks["send"], note="SMTPServerDisconnected: connection lost")
    db.execute(
        "UPDATE {{prefix}}_journal SET attachment = %s WHERE job_id = %s",
        ('{"server": "smtp.example.org", "attempt": 1}', job_id),
    )
    page.goto(f"{url}/jobs")
    screenshot(page, "jobs.png")
    page.click(f"a[href='/jobs/{job_id}']")
    page.wait_for_selector("h2:has-text('Journal')")
    assert page.locator("h1").inner_text() == job_id
    entries = page.locator("ol.timeline li")
    assert entries.count() == 1
    assert "SMTPServerDisconnected: connection lost" in entries.first.inner_text()
    assert "smtp.example.org" in entries.first.inner_text()
    screenshot(page, "job.png")


def test_the_workers_page_lists_a_live_worker(page, url, app, db, tasks, start_worker) -> None:
    seed(app, db, tasks)
    start_worker(concurrency=8)
    (info,) = wait_until(app.workers)
    page.goto(f"{url}/workers")
    row = page.locator("table.workers tbody tr")
    assert row.count() == 1
    text = row.inner_text()
    assert info.id in text
    assert "mail.send" in text
    assert "/ 8" in text
    page.wait_for_selector("#live-status.ok")
    screenshot(page, "workers.png")


def test_a_click_on_a_traceback_expands_it(page, url, app, db, tasks) -> None:
    job_id = dead_job(
        app, db, tasks["send"], note="ValueError: no such mailbox", traceback=traceback_text()
    )
    page.goto(f"{url}/jobs/{job_id}")
    shown = page.locator("details.traceback pre")
    assert not shown.is_visible()
    page.click("details.traceback summary")
    assert shown.is_visible()
    assert "raise ValueError(message)" in shown.inner_text()
    page.evaluate("document.activeElement.blur(); document.getElementById('job').dataset.old = 1")
    swapped = "!document.getElementById('job').dataset.old"
    wait_until(lambda: page.evaluate(swapped))  # a live refresh swapped the region
    assert shown.is_visible()  # the reader's choice survived it
    screenshot(page, "job-traceback.png")


def test_retry_from_the_job_page_changes_the_row(page, url, app, db, tasks) -> None:
    job_id = dead_job(app, db, tasks["send"])
    sign_in(page, url)
    page.goto(f"{url}/jobs/{job_id}")
    page.click("#retry")
    page.wait_for_selector("text=Retried: the job is pending again")
    assert page.locator(".actions .status").inner_text() == "pending"
    row = db.one("SELECT status, failure_count FROM {{prefix}}_jobs WHERE id = %s", (job_id,))
    assert row == {"status": "pending", "failure_count": 0}
    assert [e["note"] for e in db.journal(job_id)][-1] == "retried by operator"


def test_a_job_enqueued_after_the_page_loaded_appears_without_a_reload(page, url, tasks) -> None:
    tasks["send"].delay("first@example.org")
    page.goto(f"{url}/jobs")
    page.wait_for_selector("table.jobs")
    page.evaluate("window.loadedOnce = 'yes'")
    ref = tasks["send"].delay("late@example.org")
    page.wait_for_selector(f"a[href='/jobs/{ref.id}']", timeout=15000)
    assert page.evaluate("window.loadedOnce") == "yes"  # the same document: no reload


def test_schedules_enqueue_and_a_refused_enqueue(page, url, db, problems) -> None:
    page.goto(f"{url}/schedules")
    page.wait_for_selector("text=0 3 * * *")
    sign_in(page, url)
    page.goto(f"{url}/enqueue")
    page.select_option("#enqueue-kind", "mail.send")
    page.fill("textarea[name=kwargs]", '{"subjekt": "typo"}')
    screenshot(page, "enqueue.png")
    page.click("#enqueue-submit")
    page.wait_for_selector("text=Refused, nothing was written")
    screenshot(page, "enqueue-refused.png")
    assert db.jobs() == []
    assert problems == [
        "Failed to load resource: the server responded with a status of 400 (Bad Request)"
    ]
    problems.clear()
    page.fill("textarea[name=args]", '["ops@example.org"]')
    page.fill("textarea[name=kwargs]", '{"subject": "hi"}')
    page.click("#enqueue-submit")
    page.wait_for_selector("text=Enqueued.")
    (row,) = db.jobs()
    assert page.locator("h1").inner_text() == row["id"]


def test_the_job_page_shows_the_stored_result(page, url, app, tasks) -> None:
    @app.task(kind="reports.totals")
    def totals(month: str) -> dict[str, object]:
        return {"month": month, "rows": 3, "sum": 12.5, "note": "<script>alert(1)</script>"}

    ref = totals.delay("2026-11")
    drain(app, ["reports.totals"])
    page.goto(f"{url}/jobs/{ref.id}")
    shown = page.locator("#result pre.json")
    assert '"month": "2026-11"' in shown.inner_text()
    assert '"note": "<script>alert(1)</script>"' in shown.inner_text()  # text, never markup
    assert page.locator("#result script").count() == 0
    screenshot(page, "job-result.png")


def test_the_schedules_page_shows_a_beat_that_starts_without_a_reload(page, url, app) -> None:
    page.goto(f"{url}/schedules")
    page.wait_for_selector("#beat .warning:has-text('No beat is running')")
    page.evaluate("window.loadedOnce = 'yes'")
    beat = Beat(app, interval=0.2, standby_interval=0.2)
    beat.start()
    try:
        page.wait_for_selector("#beat dt:has-text('active since')", timeout=15000)
        assert page.evaluate("window.loadedOnce") == "yes"  # the same document: no reload
        assert page.locator("#beat dd").first.inner_text() == socket.gethostname()
        page.wait_for_selector("#live-status.ok")
        screenshot(page, "schedules.png")
    finally:
        beat.stop(grace=5)


def test_a_click_opens_a_workflow_whose_steps_finish_without_a_reload(
    page, url, app, tasks
) -> None:
    @app.task(kind="reports.part")
    def part(region: str) -> int:
        return len(region)

    @app.task(kind="reports.merge")
    def merge(counts: list[int]) -> int:
        return sum(counts)

    done = chain(part.s("north"), part.si("south")).delay()
    drain(app, ["reports.part"])
    regions = ("eu-west", "eu-north", "us-east", "ap-south")
    ref = chord([part.s(region) for region in regions], merge.s()).delay()
    page.goto(f"{url}/workflows")
    rows = page.locator("table.workflows tbody tr")
    assert rows.count() == 2
    assert done.id in rows.nth(1).inner_text()
    assert "completed" in rows.nth(1).inner_text()
    screenshot(page, "workflows.png")
    page.click(f"a[href='/workflows/{ref.id}']")
    page.wait_for_selector("table.steps")
    assert page.locator("h1").inner_text() == ref.id
    assert page.locator("table.steps tbody tr").count() == 5
    assert page.locator("table.steps .status.s-waiting").count() == 1
    page.evaluate("window.loadedOnce = 'yes'")
    drain(app, ["reports.part", "reports.merge"])
    page.wait_for_selector("table.steps .status.s-completed >> nth=4", timeout=15000)
    assert page.evaluate("window.loadedOnce") == "yes"  # the same document: no reload
    screenshot(page, "workflow.png")
    callback = app.workflow(ref.id).steps[-1].id
    page.click(f"table.steps a[href='/jobs/{callback}'] >> nth=0")
    page.wait_for_selector("#workflow-panel tr.current")
    assert "#0, #1, #2, #3" in page.locator("#workflow-panel tr.current").inner_text()
    assert page.locator("#result pre.json").inner_text() == str(sum(map(len, regions)))
    screenshot(page, "job-workflow.png")
