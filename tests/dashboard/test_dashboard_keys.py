"""The dashboard's keys page (ADR 0138): per keyed kind, the limits in force and the
busiest keys by running then pending jobs, escaped; read-only."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import venturi
from venturi.runtime.claim_plan import ClaimPlan


def test_the_keys_page_shows_each_keyed_kind_s_busiest_keys_escaped(
    client: Any, app: venturi.App
) -> None:
    @app.task(kind="tenants.sync", concurrency_key=lambda tenant, **_: tenant, key_concurrency=2)
    def sync(tenant: str, n: int) -> int:
        return n

    sync.delay_many([("<b>acme</b>", n) for n in range(3)] + [("zeta", 0)])
    plan = ClaimPlan.for_tasks({sync.kind: sync}, shared=app.shared_limits())
    claimed = app.backend.claim_limited(
        kinds=[sync.kind], limit=1, worker_id="w:1", lease=timedelta(minutes=1), limits=plan.limits
    )
    assert len(claimed.jobs) == 1

    html = client.get("/keys").text
    assert "key_concurrency=2" in html
    rows = re.findall(
        r"<tr><td><code>(.*?)</code></td><td class=\"num\">(\d+)</td>"
        r"<td class=\"num\">(\d+)</td></tr>",
        html,
    )
    # The first claim takes the first key in rotation order ("<" sorts before "z").
    assert claimed.jobs[0].payload["tenant"] == "<b>acme</b>"
    assert rows == [("&lt;b&gt;acme&lt;/b&gt;", "1", "2"), ("zeta", "0", "1")]
    assert "<b>acme</b>" not in html
    assert "mail.send" not in html.split('id="keys"')[1]  # unkeyed kinds are not listed


def test_the_keys_page_without_keyed_kinds_says_how_to_declare_one(client: Any) -> None:
    assert "No task declares" in client.get("/keys").text
