"""The storage boundary (ADR 8): lifecycle verbs in venturi's own types, one Protocol per role.

Each caller types against the role it uses, so what it may ask of storage is
written in its signature: the task layer and beat enqueue (``Enqueue``), the
claim runner takes jobs (``Claims``), the committer, lease keeper and a
stopping worker act on claimed rows (``Leases``), waiters and leaders agree on
time, wake-ups and roles (``Coordination``), the App's operator methods read
and change jobs (``Operator``), workers keep the registry (``Workers``),
result waiters read outcomes (``Results``), workflows are written and read
(``Workflows``), operators pause kinds, override limits and store schedules
(``Control``), durable runs record steps and the App sends events (``Durable``),
and the App runs migrations and the start check and closes (``Schema``);
workers register failure callbacks (``Callbacks``), and the operator reads the
keys of keyed kinds (``Keys``). ``Backend`` is their union: what an adapter
implements and what the App holds. ``queries.sql`` and the PostgreSQL adapter's
modules follow the same roles in the same order.

No SQL, rows, cursors or driver exceptions cross the boundary. The
``connection`` handle of ``enqueue`` is typed ``object`` so this module never
names psycopg; the PostgreSQL adapter documents which handles it accepts.

Every method that changes a claimed row takes the ``Claim`` and is fenced on it
(``status='claimed'``, same ``claimed_by``, same ``run_count``; ADR 19): a
worker that lost its lease can never overwrite a newer claim's outcome.

Each member's docstring is its contract, held by ``tests/contract/`` (one
module per role). Unless it says otherwise, an unreachable store raises
``BackendUnavailable``, a prefix without its tables ``SchemaMissing``.
"""

from __future__ import annotations

from typing import Protocol

from venturi.backend.callbacks import Callbacks, Keys
from venturi.backend.control import Control
from venturi.backend.coordination import Coordination, Leadership, Listener
from venturi.backend.durable import Durable
from venturi.backend.fleet import Workers
from venturi.backend.jobs import CAP_RECHECK, Claims, Enqueue, Leases
from venturi.backend.operator import Operator
from venturi.backend.outputs import Results, Workflows
from venturi.backend.schema import Schema

__all__ = [
    "CAP_RECHECK",
    "Backend",
    "Callbacks",
    "Claims",
    "Control",
    "Coordination",
    "Durable",
    "Enqueue",
    "Keys",
    "Leadership",
    "Leases",
    "Listener",
    "Operator",
    "Results",
    "Schema",
    "Workers",
    "Workflows",
]


class Backend(
    Enqueue,
    Claims,
    Leases,
    Coordination,
    Operator,
    Workers,
    Results,
    Workflows,
    Control,
    Durable,
    Schema,
    Callbacks,
    Keys,
    Protocol,
):
    """Every role: what a storage adapter implements and what the App holds.

    A caller that needs one role types against it, not against ``Backend``.
    """
