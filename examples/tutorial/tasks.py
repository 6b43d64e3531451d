"""The tutorial's tasks (docs/tutorial.md): an App, four tasks and a schedule.

    venturi migrate --app tasks:app
    venturi worker --app tasks:app
    venturi beat --app tasks:app

The database is $VENTURI_DATABASE_URL, else the embedded server
(``pip install 'venturi[embedded]'``).
"""

from __future__ import annotations

import venturi

app = venturi.App()


@app.task
def add(a: int, b: int) -> int:
    return a + b


@app.task(max_failures=3)
def word_count(ctx: venturi.Context, text: str) -> int:
    if ctx.run_count == 1 and "flaky" in text:
        raise ConnectionError("the first try of a flaky text fails, on purpose")
    return len(text.split())


@app.task
def total(counts: list[int]) -> int:
    return sum(counts)


@app.task(schedule="* * * * *")
def heartbeat() -> str:
    return "still here"
