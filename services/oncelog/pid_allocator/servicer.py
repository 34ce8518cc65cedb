"""PidAllocatorServicer: protobuf ↔ ProducerIdAllocator."""

from __future__ import annotations

import asyncio

from oncelog.api.pid import v1 as pb
from oncelog.pid_allocator.allocator import ProducerIdAllocator


class PidAllocatorServicer(pb.PidAllocatorServiceServicer):
    """Serve AllocateProducerIdBlock; the SQL round trip runs off the event loop."""

    def __init__(self, allocator: ProducerIdAllocator) -> None:
        self.allocator = allocator

    async def AllocateProducerIdBlock(
        self, request: pb.AllocateProducerIdBlockRequest, context: object
    ) -> pb.AllocateProducerIdBlockResponse:
        block = await asyncio.to_thread(
            self.allocator.allocate, request.requester_id, request.requester_epoch, request.block_size
        )
        return pb.AllocateProducerIdBlockResponse(first_id=block.first_id, last_id=block.last_id)
