"""oncelog's asyncio client: ``oncelog.aio.Producer`` and ``oncelog.aio.Consumer``, the awaitable twins of
:class:`oncelog.client.Producer` and :class:`oncelog.client.Consumer`.

Import from here::

    from oncelog.aio import Consumer, Producer

    async with Producer(bootstrap) as producer:
        metadata = await producer.send("orders", b"hello")

    async with Consumer(bootstrap, group_id="billing") as consumer:
        await consumer.subscribe(["orders"])
        records = await consumer.poll(timeout_ms=1000)
"""

from oncelog.client.aio_consumer import AsyncConsumer as Consumer
from oncelog.client.aio_producer import AsyncProducer as Producer

__all__ = ["Consumer", "Producer"]
