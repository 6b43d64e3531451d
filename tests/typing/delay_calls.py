"""Type-checked by tests/unit/test_typing.py, never run: ``.delay()`` and ``await
.adelay()`` are checked against the handler's signature (without ``ctx``), and a ref's
result is typed from the handler's return annotation (an ``async def`` handler's
awaited value). Lines ending in ``# rejected`` must be flagged by mypy; every other
line must pass."""

from __future__ import annotations

from datetime import timedelta

from venturi.context import Context
from venturi.refs import JobRef
from venturi.task import task
from venturi.types import Priority


@task(kind="typing.send", priority=Priority.HIGH, lease=timedelta(minutes=2))
def send(ctx: Context, to: str, subject: str, *, urgent: bool = False) -> str:
    return to


@task
def total(a: int, b: int = 0) -> int:
    return a + b


accepted: JobRef = send.delay("a@x.org", subject="hi")
accepted_too: JobRef = send.delay("a@x.org", "hi", urgent=True)
summed: JobRef = total.delay(1, b=2)
direct: str = send("a@x.org", "hi")

send.delay(42, subject="hi")  # rejected
send.delay("a@x.org")  # rejected
send.delay("a@x.org", subjekt="hi")  # rejected
total.delay("1")  # rejected
wrong: int = send("a@x.org", "hi")  # rejected


async def enqueue_from_async_code() -> tuple[JobRef, JobRef, list[JobRef]]:
    awaited: JobRef = await send.adelay("a@x.org", subject="hi")
    applied: JobRef = await send.aapply_async(args=("a@x.org",), countdown=5)
    many: list[JobRef] = await total.adelay_many([{"a": 1}])
    await send.adelay(42, subject="hi")  # rejected
    await total.adelay("1")  # rejected
    return awaited, applied, many


def forgot_to_await() -> JobRef:
    return send.adelay("a@x.org", subject="hi")  # rejected


@task(kind="typing.async")
async def fetch(ctx: Context, url: str, *, retries: int = 0) -> bytes:
    return url.encode()


fetched: JobRef = fetch.delay("https://x.org", retries=2)
fetch.delay(42)  # rejected
fetch.delay("https://x.org", tries=2)  # rejected


async def enqueue_an_async_task() -> tuple[bytes, JobRef]:
    body: bytes = await fetch("https://x.org")
    await fetch.adelay(b"x")  # rejected
    return body, await fetch.adelay("https://x.org")


count: int = total.delay(1).result(timeout=5)
count_too: int = total.delay(1).get(timeout=5)
not_a_count: str = total.delay(1).result()  # rejected
body_later: bytes = fetch.delay("https://x.org").result()
not_a_body: str = fetch.delay("https://x.org").get()  # rejected
typed_ref: JobRef[int] = total.delay(2)
untyped_ref: JobRef = send.delay("a@x.org", subject="hi")


async def wait_from_async_code() -> int:
    ref = await total.adelay(1)
    body: bytes = await (await fetch.adelay("https://x.org")).aresult()
    wrong: str = await ref.aresult()  # rejected
    return len(wrong) + await ref.aresult() + len(body)
