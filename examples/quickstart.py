"""Quickstart: declare a task, enqueue jobs, run a worker, read the results.

    python examples/quickstart.py

Needs no configuration: the database is $VENTURI_DATABASE_URL, else the
embedded server in your user data directory (``pip install 'venturi[embedded]'``).
In production the worker is its own process: ``venturi worker --app
examples.quickstart:app``; here it runs as threads of this script.
"""

from __future__ import annotations

import logging
import threading
import time

import venturi

app = venturi.App()


@app.task(kind="quickstart.word_count")
def word_count(text: str) -> int:
    return len(text.split())


@app.task(kind="quickstart.greet", max_failures=3)
def greet(ctx: venturi.Context, name: str) -> str:
    # A handler taking ``ctx`` knows its run; the first run of Ada's job fails
    # on purpose and is retried after the task's backoff (about a second).
    if name == "Ada" and ctx.run_count == 1:
        raise ConnectionError("mail server busy")
    return f"hello {name} (run {ctx.run_count})"


def main() -> int:
    # Retries are logged as warnings with their traceback; the journal below shows them.
    logging.basicConfig(level=logging.ERROR, format="%(name)s %(levelname)s %(message)s")
    app.migrate()
    refs = [word_count.delay("the quick brown fox"), greet.delay("Grace"), greet.delay("Ada")]

    worker = venturi.Worker(app, concurrency=4)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while not all(app.job(ref.id).job.status.is_terminal for ref in refs):
            if time.monotonic() > deadline:
                print("jobs did not finish within 30 s")
                return 1
            threading.Event().wait(0.1)
    finally:
        worker.stop()

    for ref in refs:
        detail = app.job(ref.id)
        timeline = ", ".join(f"{e.outcome.value}: {e.note}" for e in detail.journal)
        print(f"{detail.job.kind} {detail.job.id} {detail.job.status.value} [{timeline}]")
    app.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
