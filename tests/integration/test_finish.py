"""finish_jobs writes exactly what the outcomes say: delays to the microsecond, etas,
carries (JSON null included), notes and attachments, each with its journal entry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import venturi
from venturi.types import Finished, Outcome, OutcomeKind

LEASE = timedelta(minutes=1)


def test_finish_records_every_field_of_every_outcome_exactly(app: venturi.App, db: Any) -> None:
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at, carry)
        SELECT 'job-' || n, 'finish.kind', '{}', 'pending', now() - make_interval(secs => 10 - n),
               now() - make_interval(secs => 10 - n), '{"a": 1}'
        FROM generate_series(1, 3) AS n
        """
    )
    paused, retried, completed = app.backend.claim(
        kinds=["finish.kind"], limit=3, worker_id="h:1", lease=LEASE
    )
    delay = timedelta(seconds=90, microseconds=123456)
    eta = datetime(2031, 5, 6, 7, 8, 9, 654321, tzinfo=UTC)

    written = app.backend.finish(
        [
            Finished(paused.claim, Outcome(OutcomeKind.PAUSED, delay=delay, carry="null")),
            Finished(
                retried.claim,
                Outcome(OutcomeKind.RETRIED, note="Boom: x", is_failure=True, eta=eta),
            ),
            Finished(
                completed.claim,
                Outcome(
                    OutcomeKind.COMPLETED,
                    note='h\u00e9llo \u2713 "quoted"',
                    carry='{"b": [1, 2.5]}',
                    attachment='{"k": [1, 2], "s": "\u00fc"}',
                ),
            ),
        ]
    )

    assert written == {"job-1", "job-2", "job-3"}
    rows = {
        row["id"]: row
        for row in db.all(
            "SELECT j.id, j.status, j.visible_at, j.carry, j.failure_count, j.finished_at,"
            " e.outcome, e.note, e.attachment, e.recorded_at"
            " FROM {{prefix}}_jobs AS j JOIN {{prefix}}_journal AS e ON e.job_id = j.id"
        )
    }
    one, two, three = rows["job-1"], rows["job-2"], rows["job-3"]
    assert (one["status"], one["outcome"], one["failure_count"]) == ("pending", "paused", 0)
    assert one["visible_at"] - one["recorded_at"] == delay
    assert one["carry"] is None  # JSON null replaced {"a": 1}
    assert (two["status"], two["outcome"], two["failure_count"]) == ("pending", "retried", 1)
    assert (two["visible_at"], two["note"], two["carry"]) == (eta, "Boom: x", {"a": 1})
    assert (three["status"], three["outcome"]) == ("completed", "completed")
    assert three["finished_at"] == three["recorded_at"]
    assert three["note"] == 'h\u00e9llo \u2713 "quoted"'
    assert three["carry"] == {"b": [1, 2.5]}
    assert three["attachment"] == {"k": [1, 2], "s": "\u00fc"}
