"""oncelog.outbox: a database commit and an oncelog transaction that commit together or not at all.

The transactional outbox without a relay: :func:`atomic_send` prepares the oncelog transaction (two-phase commit,
design/kafka-semantics.md §5.7), writes its token into the ``oncelog_outbox`` table in the same database transaction
as the application's rows, commits the database, then completes the oncelog transaction. If the process dies in
between, :func:`recover` (at the next start) or the coordinator's check-back (:class:`CheckBackServer`) finishes it
as the database decided. SQLAlchemy 2; SQLite and PostgreSQL. README "Atomic with your database" shows it whole.
"""

from oncelog.outbox.atomic import Send, atomic_send, outcome_of, recover
from oncelog.outbox.check_service import CheckBackServer, OutboxCheckServicer, check_back_spec
from oncelog.outbox.table import COMMITTED, ROLLED_BACK, claim, create_outbox_table, outbox, prune, record_commit

__all__ = [
    "COMMITTED",
    "ROLLED_BACK",
    "CheckBackServer",
    "OutboxCheckServicer",
    "Send",
    "atomic_send",
    "check_back_spec",
    "claim",
    "create_outbox_table",
    "outbox",
    "outcome_of",
    "prune",
    "record_commit",
    "recover",
]
