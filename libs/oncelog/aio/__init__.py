"""oncelog's asyncio client: ``oncelog.aio.Producer``, the awaitable twin of :class:`oncelog.client.Producer`.

Import from here::

    from oncelog.aio import Producer

    async with Producer(bootstrap) as producer:
        metadata = await producer.send("orders", b"hello")
"""

from oncelog.client.aio_producer import AsyncProducer as Producer

__all__ = ["Producer"]
