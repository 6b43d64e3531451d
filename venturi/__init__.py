"""venturi: a PostgreSQL-backed background-job framework (the public API)."""

from venturi.app import App
from venturi.backoff import Exponential
from venturi.beat import Beat
from venturi.context import Context
from venturi.errors import (
    ArgumentsMismatch,
    ArgumentTypeMismatch,
    EventAlreadySent,
    EventTimeout,
    Fail,
    InvalidArgument,
    JobFailed,
    JobFinished,
    JobNotFound,
    ResultTimeout,
    ResultUnavailable,
    Retry,
    VenturiError,
    WorkflowNotFound,
)
from venturi.merge import Merge
from venturi.refs import JobRef
from venturi.task import Task, task
from venturi.types import Outcome, OutcomeKind, Priority, Status
from venturi.worker import Worker
from venturi.workflows import chain, chord, group

__all__ = [
    "App",
    "ArgumentTypeMismatch",
    "ArgumentsMismatch",
    "Beat",
    "Context",
    "EventAlreadySent",
    "EventTimeout",
    "Exponential",
    "Fail",
    "InvalidArgument",
    "JobFailed",
    "JobFinished",
    "JobNotFound",
    "JobRef",
    "Merge",
    "Outcome",
    "OutcomeKind",
    "Priority",
    "ResultTimeout",
    "ResultUnavailable",
    "Retry",
    "Status",
    "Task",
    "VenturiError",
    "Worker",
    "WorkflowNotFound",
    "chain",
    "chord",
    "group",
    "task",
]
