"""venturi: a PostgreSQL-backed background-job framework (the public API)."""

from venturi.app import App
from venturi.context import Context
from venturi.errors import Fail, Retry, VenturiError
from venturi.types import JobRef, Priority, Status

__all__ = ["App", "Context", "Fail", "JobRef", "Priority", "Retry", "Status", "VenturiError"]
