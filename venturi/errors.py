"""Every error venturi raises, and the two signals a handler may raise.

The tree::

    VenturiError
    ├── ConfigurationError        bad settings, found at construction or decoration
    │   ├── InvalidPrefix         a prefix that could not be spliced into SQL safely (ADR 6)
    │   ├── EmbeddedUnavailable   no database URL and the `embedded` extra is missing
    │   ├── DuplicateKind         two different functions registered under one kind
    │   ├── InvalidSchedule       a cron expression or time zone that does not parse
    │   │   └── DuplicateSchedule a stored schedule's name is taken (ADR 0139)
    │   └── NoCurrentApp          a default-registry task was enqueued before any App existed
    ├── EnqueueError              a call that cannot become a job; nothing was written
    │   ├── ArgumentsMismatch     the call does not fit the handler's signature
    │   │   └── ArgumentTypeMismatch  a value does not fit its parameter's annotation
    │   │                             (also an InvalidArgument)
    │   ├── InvalidPayload        a value that is not strict JSON (also carry and attachments)
    │   ├── InvalidPriority       not one of the three tiers (ADR 22)
    │   ├── InvalidDelay          negative countdown, naive eta, both countdown and eta
    │   └── InvalidKind           empty kind, or one with control characters
    ├── InvalidArgument           an operation's argument out of range (limit, status, ...)
    ├── JobNotFound               an operation named an id that does not exist
    ├── KindNotFound              no task registers the kind and no row or state has it
    ├── ScheduleNotFound          no stored (or declared) schedule has that name
    ├── WorkflowNotFound          no step of that workflow exists (no such id, or cleaned up)
    ├── InvalidState              an operation on a job whose status does not allow it
    ├── JobFailed                 a waited-for job ended dead (job id, note; ADR 0124)
    ├── JobFinished               an event sent to a completed or dead job (ADR 0137)
    ├── EventAlreadySent          a second event of one name to one job (ADR 0137)
    ├── EventTimeout              ctx.wait_for's timeout passed with no event (a TimeoutError)
    ├── ClaimLost                 a durable step of a run that no longer holds its claim
    ├── ResultTimeout             a waited-for job was not terminal in time (a TimeoutError)
    ├── ResultUnavailable         a completed job has no stored result (over the size bound)
    ├── MigrationError            the migration runner refused to go on (ADR 24)
    │   ├── ChecksumMismatch      an applied migration file was edited afterwards
    │   └── DatabaseAhead         the database has versions this code does not know
    ├── BackendUnavailable        the database could not be reached: an outage, retried
    │   ├── DatabaseRefused       the server answered "no" (no such database, bad login):
    │   │                         permanent, never retried by the service loops
    │   └── ReplicaUnavailable    the read replica (read_url) did not answer (ADR 0140)
    └── SchemaMissing             the prefix's tables do not exist: run ``venturi migrate``

``Fail`` and ``Retry`` are control flow raised *by handlers*; they are not
``VenturiError`` so that ``except VenturiError`` around ``.delay()`` never
swallows them. ``describe_exception`` is how any exception is shown in one
line, in journal notes, CLI errors and integrations alike (public: it is in
``__all__``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

__all__ = [
    "ArgumentTypeMismatch",
    "ArgumentsMismatch",
    "BackendUnavailable",
    "ChecksumMismatch",
    "ClaimLost",
    "ConfigurationError",
    "DatabaseAhead",
    "DatabaseRefused",
    "DuplicateKind",
    "DuplicateSchedule",
    "EmbeddedUnavailable",
    "EnqueueError",
    "EventAlreadySent",
    "EventTimeout",
    "Fail",
    "InvalidArgument",
    "InvalidDelay",
    "InvalidKind",
    "InvalidPayload",
    "InvalidPrefix",
    "InvalidPriority",
    "InvalidSchedule",
    "InvalidState",
    "JobFailed",
    "JobFinished",
    "JobNotFound",
    "KindNotFound",
    "MigrationError",
    "NoCurrentApp",
    "ReplicaUnavailable",
    "ResultTimeout",
    "ResultUnavailable",
    "Retry",
    "ScheduleNotFound",
    "SchemaMissing",
    "VenturiError",
    "WorkflowNotFound",
    "describe_exception",
]


class VenturiError(Exception):
    """Base class of every error venturi raises."""


class ConfigurationError(VenturiError):
    """Settings that cannot work; raised before any SQL is sent."""


class InvalidPrefix(ConfigurationError):
    def __init__(self, prefix: str, reason: str) -> None:
        super().__init__(f"invalid prefix {prefix!r}: {reason}")
        self.prefix = prefix
        self.reason = reason


class EmbeddedUnavailable(ConfigurationError):
    """No database URL was given and the embedded server cannot be started."""


class DuplicateKind(ConfigurationError):
    def __init__(self, kind: str) -> None:
        super().__init__(
            f"kind {kind!r} is already registered to another function; "
            "pass kind=... to give one of them a distinct name"
        )
        self.kind = kind


class InvalidSchedule(ConfigurationError):
    """A cron expression or a time zone that does not parse."""


class DuplicateSchedule(InvalidSchedule):
    """A schedule of that name exists already (stored, or declared in code); nothing
    was written (ADR 0139)."""

    def __init__(self, name: str, where: str) -> None:
        super().__init__(
            f"a schedule named {name!r} is already {where}; pick another name, or remove "
            "the stored one first (app.remove_schedule / venturi schedules remove)"
        )
        self.name = name


class NoCurrentApp(ConfigurationError):
    def __init__(self, kind: str) -> None:
        super().__init__(
            f"cannot enqueue {kind!r}: no venturi.App has been created in this process; "
            "create one (venturi.App(...)) or register the task with app.task(...)"
        )
        self.kind = kind


class EnqueueError(VenturiError):
    """A call that cannot become a job. Nothing was written."""


class ArgumentsMismatch(EnqueueError):
    """The arguments do not fit the handler's signature."""


class InvalidPayload(EnqueueError):
    """A value that is not strict JSON (payload, carry or attachment)."""


class InvalidPriority(EnqueueError):
    def __init__(self, priority: object) -> None:
        super().__init__(
            f"invalid priority {priority!r}: use Priority.HIGH (0), NORMAL (1) or LOW (2)"
        )
        self.priority = priority


class InvalidDelay(EnqueueError):
    """``value`` is shown as a user wrote it: ``-5 s``, an ISO time, or left out when ``None``."""

    def __init__(self, value: timedelta | datetime | float | None, reason: str) -> None:
        shown = "" if value is None else f" {_delay_text(value)}"
        super().__init__(f"invalid delay{shown}: {reason}")
        self.value = value


def _delay_text(value: timedelta | datetime | float) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:.6f}".rstrip("0").rstrip(".") + " s"
    return repr(value)


class InvalidKind(EnqueueError):
    def __init__(self, kind: object, reason: str) -> None:
        super().__init__(f"invalid kind {kind!r}: {reason}")
        self.kind = kind


class InvalidArgument(VenturiError, ValueError):
    """An operation's argument is out of range; nothing was read or written."""


class ArgumentTypeMismatch(ArgumentsMismatch, InvalidArgument):
    """An argument's value does not fit its parameter's annotation (SPEC 6.6); nothing
    was written. ``parameter`` names it; ``kind`` is the task's."""

    def __init__(self, kind: str, parameter: str, expected: str, value: object) -> None:
        shown = repr(value)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        super().__init__(
            f"{kind}: argument {parameter!r} must be {expected}, "
            f"got {type(value).__qualname__} {shown}"
        )
        self.kind = kind
        self.parameter = parameter


class JobNotFound(VenturiError):
    def __init__(self, job_id: str) -> None:
        super().__init__(f"no job with id {job_id!r}")
        self.job_id = job_id


class KindNotFound(VenturiError):
    """No task of the App registers the kind, and the prefix has no job or stored state
    of it (ADR 0139); nothing was written."""

    def __init__(self, kind: str) -> None:
        super().__init__(
            f"unknown kind {kind!r}: no task of this App registers it and the prefix has "
            "no job of it; check the spelling, or pass --app so its tasks are registered"
        )
        self.kind = kind


class ScheduleNotFound(VenturiError):
    def __init__(self, name: str) -> None:
        super().__init__(
            f"no schedule named {name!r}; `venturi schedules list` shows the schedules"
        )
        self.name = name


class WorkflowNotFound(VenturiError):
    """No step of that workflow exists: no such id, or every step was cleaned up."""

    def __init__(self, workflow_id: str) -> None:
        super().__init__(f"no workflow with id {workflow_id!r}")
        self.workflow_id = workflow_id


class InvalidState(VenturiError):
    def __init__(self, job_id: str, status: str, action: str, allowed: str) -> None:
        super().__init__(
            f"cannot {action} job {job_id}: it is {status}, and only {allowed} jobs can be"
        )
        self.job_id = job_id
        self.status = status


class JobFailed(VenturiError):
    """The job a caller waits for ended ``dead``; ``note`` is its last journal note."""

    def __init__(self, job_id: str, note: str | None) -> None:
        super().__init__(f"job {job_id} ended dead: {note or 'no note'}")
        self.job_id = job_id
        self.note = note


class JobFinished(VenturiError):
    """An event was sent to a job that already ended (``status`` completed or dead):
    nobody would read it, so nothing was written."""

    def __init__(self, job_id: str, status: str) -> None:
        super().__init__(f"cannot send an event to job {job_id}: it is {status} already")
        self.job_id = job_id
        self.status = status


class EventAlreadySent(VenturiError):
    """An event of this name was sent to this job before; an event is sent once, and
    the first payload stands (send under another name for another event)."""

    def __init__(self, job_id: str, name: str) -> None:
        super().__init__(f"event {name!r} was already sent to job {job_id}; the first one stands")
        self.job_id = job_id
        self.name = name


class EventTimeout(VenturiError, TimeoutError):
    """Raised by ``ctx.wait_for`` when its timeout passed before the event was sent.

    The timeout is recorded: every later run of the job raises it again at the same
    ``wait_for``, even if the event arrives afterwards. Catch it to go on without it.
    """

    def __init__(self, job_id: str | None, name: str) -> None:
        super().__init__(f"job {job_id}: no event {name!r} arrived before the wait's timeout")
        self.job_id = job_id
        self.name = name


class ClaimLost(VenturiError):
    """A durable step finished in a run that no longer holds its job's claim (its lease
    expired and the job was recovered): nothing was recorded, the run holding the claim
    records its own. Raised from ``ctx.step`` so the stale run stops there."""

    def __init__(self, job_id: str, run_count: int, step: str) -> None:
        super().__init__(
            f"job {job_id} run {run_count} lost its claim; step {step!r} was not recorded"
        )
        self.job_id = job_id
        self.run_count = run_count
        self.step = step


class ResultTimeout(VenturiError, TimeoutError):
    """The job was not terminal within the wait's timeout; it may still finish."""

    def __init__(self, job_id: str, timeout: float, status: str) -> None:
        super().__init__(f"job {job_id} is still {status} after waiting {timeout:g} s")
        self.job_id = job_id
        self.timeout = timeout
        self.status = status


class ResultUnavailable(VenturiError):
    """The job completed without a stored result: its return value was over the
    backend's ``result_max_bytes`` (the note says how large), or it completed
    before results were stored (V6)."""

    def __init__(self, job_id: str, note: str | None) -> None:
        super().__init__(f"job {job_id} completed without a stored result: {note or 'no note'}")
        self.job_id = job_id
        self.note = note


class MigrationError(VenturiError):
    """The migration runner refused to go on."""


class ChecksumMismatch(MigrationError):
    def __init__(self, version: int, name: str) -> None:
        super().__init__(
            f"migration V{version}__{name} was edited after it was applied "
            "(checksum differs from the history table); restore the original file and add a "
            "new migration instead"
        )
        self.version = version


class DatabaseAhead(MigrationError):
    def __init__(self, applied: int, known: int) -> None:
        super().__init__(
            f"the database is at migration V{applied} but this code knows only up to V{known}; "
            "upgrade venturi before running it against this database"
        )
        self.applied = applied
        self.known = known


class BackendUnavailable(VenturiError):
    """The database could not be reached, or a connection broke mid-operation."""


class ReplicaUnavailable(BackendUnavailable):
    """The read replica (``read_url``) could not be reached; the primary is not concerned."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(
            f"read replica {address} unavailable ({reason}); the App's reads of jobs and "
            "stats go to read_url (--read-url, $VENTURI_READ_DATABASE_URL): fix or drop it; "
            "enqueues, workers and changes use the primary"
        )
        self.address = address


class DatabaseRefused(BackendUnavailable):
    """The server was reached and refused the session, for a reason waiting will not fix.

    The database does not exist, the login failed (no such role, wrong
    password, no ``pg_hba.conf`` entry), or the role may not connect. A
    subclass of ``BackendUnavailable`` so that every caller that copes with an
    outage copes with this too; the service loops (runtime/service.py) tell it
    apart and stop instead of retrying (ADR 0118).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the database refused the connection: {reason} "
            "(check the database URL and the role; this is not retried)"
        )
        self.reason = reason


class SchemaMissing(VenturiError):
    """The prefix is not migrated, or not up to this version's latest migration."""

    def __init__(self, prefix: str, *, missing: str | None = None) -> None:
        what = (
            f"the schema of prefix {prefix!r} lacks {missing} (an older version migrated it)"
            if missing is not None
            else f"the tables of prefix {prefix!r} do not exist"
        )
        super().__init__(f"{what}: run `venturi migrate` (or app.migrate()) first")
        self.prefix = prefix


class Fail(Exception):
    """Raised by a handler: the job goes ``dead`` at once, no retry (ADR 13)."""

    def __init__(self, message: str = "") -> None:
        super().__init__(message)
        self.message = message


class Retry(Exception):
    """Raised by a handler: a failure retried after an explicit delay (ADR 13).

    Counts as a failure (``failure_count += 1``) so that the backstop still
    applies. ``delay=None`` uses the task's backoff.
    """

    def __init__(self, message: str = "", *, delay: timedelta | float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.delay = timedelta(seconds=delay) if isinstance(delay, int | float) else delay


def describe_exception(exc: BaseException) -> str:
    """One line for any exception: ``"Type: message"``, or ``"Type"`` when the message is empty.

    The form of every journal note venturi writes for a failed run and of every
    CLI error line; an integration that turns a foreign exception into ``Fail``
    or ``Retry`` (the Django backend does) uses it so its notes read the same.
    """
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
