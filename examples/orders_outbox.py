"""Write an order row and publish OrderCreated atomically: both happen, or neither, across any crash.

``oncelog.outbox.atomic_send`` prepares the oncelog transaction (two-phase commit), writes its token into the
``oncelog_outbox`` table in the same database transaction as the order, commits the database, then completes the
oncelog transaction. Kill this process at any moment: the next start (``recover``) or the coordinator's check-back
(served here on ``--check-back-listen``) commits the event exactly when the order row committed.

Run it against a local cluster (``oncelog dev`` in another terminal)::

    oncelog topics create orders
    python examples/orders_outbox.py --orders 5 --db sqlite:///orders.db
    oncelog consume orders --from-beginning --isolation read_committed --timeout 2
    sqlite3 orders.db 'select * from orders'

Each order prints one JSON line, ``{"order": <id>}``, once both the row and the event are committed. PostgreSQL
works the same (``--db postgresql+psycopg://user@host/db``, extra ``postgres``).
"""

from __future__ import annotations

import argparse
import json
import sys

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from oncelog.client import Producer
from oncelog.outbox import CheckBackServer, atomic_send, create_outbox_table, recover


class Base(DeclarativeBase):
    pass


class Order(Base):
    """The application's own table."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str]
    total_cents: Mapped[int]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite:///orders.db", help="SQLAlchemy URL of the application database")
    parser.add_argument("--bootstrap", default=None, help="cluster address (default: .oncelog/cluster.json)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--transactional-id", default="orders-app-0")
    parser.add_argument("--orders", type=int, default=3, help="how many orders to place")
    parser.add_argument("--check-back-listen", default="127.0.0.1:0", help="where to serve the check-back")
    args = parser.parse_args(argv)

    engine = sa.create_engine(args.db)
    Base.metadata.create_all(engine)
    create_outbox_table(engine)
    with (
        CheckBackServer(engine, args.check_back_listen) as check_back,
        Producer(args.bootstrap, transactional_id=args.transactional_id) as producer,
    ):
        # finish whatever a crashed earlier run left prepared, as the database decided
        recovered = recover(producer, engine)
        if recovered is not None:
            print(json.dumps({"recovered": "commit" if recovered else "rollback"}), flush=True)
        with Session(engine) as session:
            first = (session.scalar(sa.select(sa.func.max(Order.id))) or 0) + 1
        for order_id in range(first, first + args.orders):
            with Session(engine) as session, atomic_send(
                session, producer, check_back_address=check_back.address
            ) as send:
                session.add(Order(id=order_id, customer=f"customer-{order_id % 7}", total_cents=100 * order_id))
                event = {"type": "OrderCreated", "order": order_id, "total_cents": 100 * order_id}
                send(args.topic, json.dumps(event).encode(), key=str(order_id).encode())
            print(json.dumps({"order": order_id}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
