"""Type-checked by tests/unit/test_typing.py, never run: the README's in-server worker
lines pass mypy as written, with and without a lifespan of the application's own.
Lines ending in ``# rejected`` must be flagged; every other line must pass."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from starlette.applications import Starlette

import venturi
from venturi.contrib.asgi import worker_lifespan

app = venturi.App()


@asynccontextmanager
async def my_lifespan(api: Any) -> AsyncIterator[dict[str, Any]]:
    yield {"started": True}


@asynccontextmanager
async def no_state(api: Any) -> AsyncIterator[None]:
    yield


api = FastAPI(lifespan=worker_lifespan(app, lifespan=my_lifespan, concurrency=4, grace=10))
plain = FastAPI(lifespan=worker_lifespan(app, concurrency=4))
stateless = Starlette(lifespan=worker_lifespan(app, lifespan=no_state))
worker_lifespan(app, lifespan="not a lifespan")  # rejected
