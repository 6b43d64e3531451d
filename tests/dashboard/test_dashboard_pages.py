"""Every page over HTTP, against the real App and PostgreSQL."""

from __future__ import annotations

import os
import re
import socket

from dashboard_support import dead_job, seed, traceback_text
from starlette.testclient import TestClient
from support import wait_until

import venturi
from venturi.dashboard.views import MAX_RESULT_SHOWN, format_json
from venturi.testing import drain

#: The start of mail.send's row in the overview's kinds table (warnings name kinds too).
MAIL_SEND_ROW = '<a href="/jobs?kind=mail.send"><code>mail.send</code></a>'


def test_overview_shows_counts_per_kind_and_status(client: TestClient, app, db, tasks) -> None:
    seed(app, db, tasks)
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    row = html[html.index(MAIL_SEND_ROW) :]
    row = row[: row.index("</tr>")]
    counts = re.findall(r'class="count s-(\w+)"[^>]*>(\d+)<', row)
    assert dict(counts) == {
        "pending": "21",
        "claimed": "3",
        "completed": "90",
        "dead": "7",
    }  # 1 scheduled
    assert "Finished per minute, last hour" in html
    assert "90 completed" in html
    assert "7 dead" in html


def test_overview_chart_has_sixty_minutes_with_the_finished_jobs(client, app, db, tasks) -> None:
    seed(app, db, tasks)
    html = client.get("/").text
    big = html[html.index('class="chart large"') :]
    big = big[: big.index("</svg>")]
    titles = re.findall(r"<title>\d\d:\d\d UTC: (\d+) completed, (\d+) dead</title>", big)
    assert len(titles) == 60
    assert sum(int(c) for c, _ in titles) == 90
    assert sum(int(d) for _, d in titles) == 7


def test_overview_flags_pending_kinds_this_app_has_no_task_for(client, app, db, tasks) -> None:
    seed(app, db, tasks)
    html = client.get("/").text
    assert "that this App has no task for" in html
    assert re.search(r'<tr class="flagged">\s*<td>\s*<a [^>]*><code>billing.invoice</code>', html)
    assert "flagged" not in html[html.index(MAIL_SEND_ROW) - 200 :][:200]


def test_overview_shows_the_oldest_eligible_age(client, app, db, tasks) -> None:
    ref = tasks["send"].delay("a@example.org")
    db.execute(
        "UPDATE {{prefix}}_jobs SET created_at = now() - interval '3 hours',"
        " visible_at = now() - interval '2 hours 5 minutes' WHERE id = %s",
        (ref.id,),
    )
    html = client.get("/").text
    assert "2h 5m" in html


def test_jobs_page_lists_newest_first_with_the_last_note(client, app, db, tasks) -> None:
    first = dead_job(app, db, tasks["send"], note="TimeoutError: smtp took too long")
    second = tasks["send"].delay("b@example.org").id
    html = client.get("/jobs").text
    assert html.index(second) < html.index(first)
    assert "TimeoutError: smtp took too long" in html


def test_jobs_page_filters_by_kind_status_and_note_text(client, app, db, tasks) -> None:
    timeout = dead_job(app, db, tasks["send"], note="TimeoutError: smtp took too long")
    refused = dead_job(app, db, tasks["send"], note="SMTPRecipientsRefused: 550")
    pending = tasks["send"].delay("c@example.org").id
    html = client.get("/jobs", params={"status": "dead", "note": "TIMEOUT"}).text
    assert timeout in html
    assert refused not in html
    assert pending not in html
    html = client.get("/jobs", params={"kind": "mail.send", "status": "pending"}).text
    assert pending in html
    assert timeout not in html
    assert client.get("/jobs", params={"kind": "other.kind"}).text.count("/jobs/01") == 0


def test_jobs_page_pages_with_the_keyset_cursor(client, app, tasks) -> None:
    refs = tasks["send"].delay_many([{"to": f"u{i}@example.org"} for i in range(60)])
    first = client.get("/jobs").text
    older = re.search(r'href="(/jobs\?after=[^"]+)"', first)
    assert older is not None
    second = client.get(older.group(1).replace("&amp;", "&")).text
    listed = set(re.findall(r'href="/jobs/([0-9A-Z]{26})"', first)) | set(
        re.findall(r'href="/jobs/([0-9A-Z]{26})"', second)
    )
    assert listed == {r.id for r in refs}
    assert client.get("/jobs", params={"after": "not-a-cursor"}).status_code == 400


def test_job_page_shows_row_payload_carry_and_timeline(client, app, db, tasks) -> None:
    job_id = dead_job(app, db, tasks["send"], note="ValueError: no such mailbox")
    db.execute("UPDATE {{prefix}}_jobs SET carry = '{\"step\": 2}' WHERE id = %s", (job_id,))
    db.execute(
        "UPDATE {{prefix}}_journal SET attachment = '{\"smtp_code\": 550}' WHERE job_id = %s",
        (job_id,),
    )
    html = client.get(f"/jobs/{job_id}").text
    assert job_id in html
    assert "dead@example.org" in html
    assert "&#34;step&#34;: 2" in html
    assert "ValueError: no such mailbox" in html
    assert "&#34;smtp_code&#34;: 550" in html
    assert "run 1" in html


def test_job_page_of_an_unknown_id_is_a_404(client) -> None:
    assert client.get("/jobs/01NOSUCHJOB000000000000000").status_code == 404


def test_schedules_page_shows_each_schedule_with_its_next_ticks(client) -> None:
    html = client.get("/schedules").text
    row = html[html.index("<code>reports.nightly</code>") :]
    html = row[: row.index("</tr>")]
    assert "<code>0 3 * * *</code>" in html
    assert "Europe/Paris" in html
    ticks = re.findall(r"<li>(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)</li>", html)
    assert len(ticks) == 5
    assert all(t.endswith(("01:00:00", "02:00:00")) for t in ticks)  # 03:00 Paris in UTC


def test_enqueue_page_offers_every_task_of_the_app(client: TestClient, signed_in: str) -> None:
    html = client.get("/enqueue").text
    assert '<option value="mail.send"' in html
    assert '<option value="reports.nightly"' in html


def test_pages_without_tasks_or_jobs_still_render(database_url: str, prefix: str, db) -> None:
    from venturi.dashboard import create_app

    db.execute(
        "TRUNCATE {{prefix}}_journal, {{prefix}}_jobs, {{prefix}}_checkpoints, {{prefix}}_events"
    )
    empty = venturi.App(database_url, prefix=prefix, set_as_current=False)
    with TestClient(create_app(empty, read_only=True), base_url="http://127.0.0.1") as c:
        for path in ("/", "/jobs", "/workers", "/schedules", "/workflows", "/enqueue"):
            assert c.get(path).status_code == 200, path
    empty.close()


def test_live_refresh_gets_the_same_page_with_fresh_rows(client, tasks) -> None:
    before = client.get("/jobs", headers={"x-venturi-live": "1"}).text
    ref = tasks["send"].delay("late@example.org")
    # the shared cache holds reads for one interval; a change made elsewhere shows after it

    def refreshed() -> str | None:
        text = client.get("/jobs", headers={"x-venturi-live": "1"}).text
        return text if ref.id in text else None

    after = wait_until(refreshed, timeout=10)
    assert ref.id not in before
    assert 'id="jobs-list"' in after
    assert after.count("<table") == 1


def test_workers_page_lists_each_live_worker_from_the_registry(client, app, start_worker):
    worker = start_worker(concurrency=3)
    (info,) = wait_until(app.workers)
    html = client.get("/workers").text
    row = html[html.rindex("<tr", 0, html.index(f"<code>{info.id}</code>")) :]
    row = row[: row.index("</tr>")]
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
    assert cells[1] == socket.gethostname()
    assert cells[2] == str(os.getpid())
    assert re.findall(r"<code>([^<]+)</code>", cells[3]) == list(info.kinds)
    assert {"mail.send", "reports.nightly"} <= set(info.kinds)
    assert ">0 / 3<" in cells[4]
    assert info.started_at.strftime("%Y-%m-%d %H:%M:%S") in cells[5]
    assert cells[6] == info.heartbeat_at.strftime("%Y-%m-%d %H:%M:%S")
    assert re.fullmatch(r"\d+s", cells[7])
    assert "1 live" in html
    worker.stop(grace=5)
    assert wait_until(lambda: "No live worker" in client.get("/workers").text)


def test_overview_flags_kinds_no_live_worker_serves_apart_from_kinds_without_a_task(
    client, app, db, tasks, start_worker
) -> None:
    seed(app, db, tasks)
    html = client.get("/").text
    no_worker = html[html.index("no live worker serves") :]
    no_worker = no_worker[: no_worker.index("</p>")]
    assert re.findall(r"<code>([^<]+)</code>", no_worker) == ["billing.invoice", "mail.send"]
    mail_row = html[html.index(MAIL_SEND_ROW) :]
    mail_row = mail_row[: mail_row.index("</td>")]
    assert "no live worker" in mail_row
    assert "no task" not in mail_row
    start_worker()
    wait_until(lambda: app.unserved_kinds() == ["billing.invoice"])

    def flagged_by_workers() -> list[str] | None:
        page = client.get("/").text
        part = page[page.index("no live worker serves") :]
        found = re.findall(r"<code>([^<]+)</code>", part[: part.index("</p>")])
        return found if found == ["billing.invoice"] else None

    assert wait_until(flagged_by_workers) == ["billing.invoice"]
    html = client.get("/").text
    assert "no live worker" not in html[html.index(MAIL_SEND_ROW) :][:400]
    invoice = html[html.index("<code>billing.invoice</code></a>") :][:600]
    assert "no task" in invoice
    assert "no live worker" in invoice


def test_job_page_shows_the_traceback_of_a_failed_run_collapsed_in_monospace(
    client, app, db, tasks
):
    job_id = dead_job(app, db, tasks["send"], traceback=traceback_text())
    html = client.get(f"/jobs/{job_id}").text
    details = re.search(
        r'<details id="traceback-\d+" class="traceback">(.*?)</details>', html, re.S
    )
    assert details is not None  # no "open": collapsed until clicked
    assert "<summary>traceback</summary>" in details.group(1)
    assert '<pre class="traceback">Traceback (most recent call last):' in details.group(1)
    assert "raise ValueError(message)\nValueError: no such mailbox" in details.group(1)
    plain = dead_job(app, db, tasks["send"])
    assert "traceback" not in client.get(f"/jobs/{plain}").text.split('id="job"')[1]


def test_a_traceback_longer_than_the_page_bound_keeps_its_end(client, app, db, tasks) -> None:
    from venturi.dashboard.views import MAX_TRACEBACK_SHOWN

    huge = "Traceback (most recent call last):\n" + "  frame\n" * 5000 + "KeyError: 'last'\n"
    job_id = dead_job(app, db, tasks["send"], traceback=huge)
    html = client.get(f"/jobs/{job_id}").text
    shown = re.search(r'<pre class="traceback">(.*?)</pre>', html, re.S)
    assert shown is not None
    omitted = len(huge) - MAX_TRACEBACK_SHOWN
    assert shown.group(1).startswith(f"[{omitted} characters of outer frames not shown]\n")
    assert shown.group(1).endswith("KeyError: &#39;last&#39;\n")
    assert len(shown.group(1)) < MAX_TRACEBACK_SHOWN + 200


def test_job_page_shows_the_stored_result_as_indented_json(client, app) -> None:
    @app.task(kind="reports.totals")
    def totals(month: str) -> dict[str, object]:
        return {"month": month, "rows": 3, "sum": 12.5, "by_day": [1, 2]}

    ref = totals.delay("2026-11")
    drain(app, ["reports.totals"])
    html = client.get(f"/jobs/{ref.id}").text
    panel = re.search(r'<div class="panel" id="result">(.*?)</div>\s*</div>', html, re.S)
    assert panel is not None
    assert (
        '<pre class="json">{\n  &#34;by_day&#34;: [\n    1,\n    2\n  ],\n'
        "  &#34;month&#34;: &#34;2026-11&#34;,\n  &#34;rows&#34;: 3,\n"
        "  &#34;sum&#34;: 12.5\n}</pre>"
    ) in panel.group(1)
    assert "No result" not in panel.group(1)


def test_job_page_tells_none_returned_from_no_result_stored(client, app, db, tasks) -> None:
    @app.task(kind="mail.noop")
    def noop() -> None:
        return None

    returned_none = noop.delay()
    drain(app, ["mail.noop"])
    completed_without_result = tasks["send"].delay("old@example.org")
    db.execute(  # as a job completed before results were stored (V6) is left
        "UPDATE {{prefix}}_jobs SET status = 'completed', finished_at = now(), run_count = 1"
        " WHERE id = %s",
        (completed_without_result.id,),
    )
    pending = tasks["send"].delay("new@example.org")
    dead = dead_job(app, db, tasks["send"])

    def panel(job_id: str) -> str:
        html = client.get(f"/jobs/{job_id}").text
        found = re.search(r'<div class="panel" id="result">(.*?)</div>\s*</div>', html, re.S)
        assert found is not None
        return found.group(1)

    assert '<pre class="json">null</pre>' in panel(returned_none.id)
    assert "The handler returned None." in panel(returned_none.id)
    assert "<pre" not in panel(completed_without_result.id)
    assert "No result stored" in panel(completed_without_result.id)
    assert "No result yet: the job has not finished." in panel(pending.id)
    assert "No result: the job ended dead" in panel(dead)


def test_a_result_longer_than_the_page_bound_is_cut_with_a_mark(client, app) -> None:
    @app.task(kind="reports.big")
    def big() -> list[str]:
        return ["x" * 1000] * 100

    ref = big.delay()
    drain(app, ["reports.big"])
    html = client.get(f"/jobs/{ref.id}").text
    shown = re.search(r'id="result">.*?<pre class="json">(.*?)</pre>', html, re.S)
    assert shown is not None
    full = format_json(["x" * 1000] * 100)
    assert shown.group(1).startswith("[\n  &#34;xxx")
    assert shown.group(1).endswith(f"\n[{len(full) - MAX_RESULT_SHOWN} more characters not shown]")


def beat_panel(client: TestClient) -> str:
    html = client.get("/schedules").text
    panel = html[html.index('id="beat"') :]
    return panel[: panel.index("</section>")]


def test_schedules_page_says_when_no_beat_is_running(client) -> None:
    beat = beat_panel(client)
    assert "No beat is running: the schedules below are not being enqueued." in beat
    assert "<dl" not in beat


def test_schedules_page_shows_the_active_beat_host_pid_and_since(client, app) -> None:
    beat = venturi.Beat(app, interval=0.2, standby_interval=0.2)
    beat.start()
    try:
        wait_until(lambda: beat.is_leader)
        leader = wait_until(app.active_beat)

        def shown_beat() -> str | None:
            panel = beat_panel(client)
            return panel if "<dl" in panel else None  # the shared cache may hold "none" a while

        shown = wait_until(shown_beat)
        cells = dict(re.findall(r"<dt>([^<]+)</dt><dd>(.*?)</dd>", shown, re.S))
        assert cells["host"] == socket.gethostname()
        assert cells["pid"] == str(os.getpid())
        assert leader.since is not None
        assert cells["active since"].startswith(leader.since.strftime("%Y-%m-%d %H:%M:%S"))
        assert re.search(r"\(\d+s\)", cells["active since"])
        assert cells["database session"] == f"PostgreSQL backend pid {leader.session_pid}"
    finally:
        beat.stop(grace=5)
    assert app.active_beat() is None
    assert wait_until(lambda: "No beat is running" in beat_panel(client))


def test_job_page_shows_a_durable_jobs_steps_and_events_escaped(client, app, db) -> None:
    @app.task(kind="durable.page")
    def fulfil(ctx: venturi.Context) -> object:
        ctx.step("<b>charge</b>", lambda: {"id": "<script>x</script>"})
        return ctx.wait_for("approved")

    ref = fulfil.delay()
    drain(app)
    app.send(ref.id, "approved", {"by": "<i>ana</i>"})
    html = client.get(f"/jobs/{ref.id}").text
    assert 'id="durable-panel"' in html
    assert "&lt;b&gt;charge&lt;/b&gt;" in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html
    assert "&lt;i&gt;ana&lt;/i&gt;" in html
    assert "<script>x" not in html and "<i>ana" not in html
    assert "2 recorded, in order" in html


def test_job_page_of_a_plain_job_has_no_steps_panel(client, app, db, tasks) -> None:
    job_id = dead_job(app, db, tasks["send"], note="ValueError: no such mailbox")
    assert 'id="durable-panel"' not in client.get(f"/jobs/{job_id}").text
