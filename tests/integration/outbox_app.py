"""An application of the outbox for the crash-window tests: one order row and one event per run, atomically.

``send`` mode runs ``atomic_send`` and, with ``--crash-at``, stops at that point: it prints ``AT <point>`` and waits
to be killed (the test sends SIGKILL). ``recover`` mode is the restarted application: ``recover()`` and exit.
The crash points wrap the producer's and the session's own methods; ``atomic_send`` itself is unchanged.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from oncelog.client import Producer
from oncelog.outbox import atomic_send, create_outbox_table, recover

POINTS = ("before_prepare", "after_prepare", "after_db_commit", "after_complete")

orders_metadata = sa.MetaData()
orders = sa.Table(
    "orders", orders_metadata, sa.Column("id", sa.Integer, primary_key=True), sa.Column("total", sa.Integer)
)


def stop_here(point: str) -> None:
    print(f"AT {point}", flush=True)
    threading.Event().wait()  # until SIGKILL


def stop_before(point: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        stop_here(point)
        return method(*args, **kwargs)

    return wrapped


def stop_after(point: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = method(*args, **kwargs)
        stop_here(point)
        return result

    return wrapped


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["send", "recover"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--db", required=True)
    parser.add_argument("--tid", required=True)
    parser.add_argument("--topic", default="")
    parser.add_argument("--order", type=int, default=0)
    parser.add_argument("--crash-at", choices=POINTS, default=None)
    parser.add_argument("--check-back", default="")
    args = parser.parse_args()
    engine = sa.create_engine(args.db)
    orders_metadata.create_all(engine)
    create_outbox_table(engine)
    with Producer(args.bootstrap, transactional_id=args.tid) as producer:
        outcome = recover(producer, engine)
        print(f"RECOVERED {outcome}", flush=True)
        if args.mode == "recover":
            return 0
        with Session(engine) as session:
            if args.crash_at == "before_prepare":
                producer.prepare_transaction = stop_before(args.crash_at, producer.prepare_transaction)  # type: ignore[method-assign]
            elif args.crash_at == "after_prepare":
                producer.prepare_transaction = stop_after(args.crash_at, producer.prepare_transaction)  # type: ignore[method-assign]
            elif args.crash_at == "after_db_commit":
                session.commit = stop_after(args.crash_at, session.commit)  # type: ignore[method-assign]
            elif args.crash_at == "after_complete":
                producer.complete_transaction = stop_after(args.crash_at, producer.complete_transaction)  # type: ignore[method-assign]
            with atomic_send(session, producer, check_back_address=args.check_back) as send:
                session.execute(sa.insert(orders).values(id=args.order, total=10 * args.order))
                send(args.topic, f"order-{args.order}".encode(), key=str(args.order).encode())
        print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
