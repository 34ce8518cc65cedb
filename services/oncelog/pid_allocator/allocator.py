"""ProducerIdAllocator: validates block requests and hands them to a BlockStore (pure domain)."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.errors import InvalidRequest
from oncelog.pid_allocator.block_store import BlockStore

MAX_BLOCK_SIZE = 1_000_000


@dataclass(frozen=True)
class ProducerIdBlock:
    """An inclusive range of producer ids owned by one requester."""

    first_id: int
    last_id: int

    @property
    def size(self) -> int:
        """Number of ids in the block."""
        return self.last_id - self.first_id + 1


class ProducerIdAllocator:
    """Lends blocks of ``default_block_size`` ids (or the size asked for) to named requesters."""

    def __init__(self, store: BlockStore, default_block_size: int = 1000) -> None:
        self.store = store
        self.default_block_size = default_block_size

    def allocate(self, requester_id: str, requester_epoch: int, block_size: int = 0) -> ProducerIdBlock:
        """Reserve the next block; raises InvalidRequest for bad input, StaleRequesterEpoch for a zombie."""
        if not requester_id:
            raise InvalidRequest("requester_id is required: the node id of the process asking for ids")
        if requester_epoch < 0:
            raise InvalidRequest(f"requester_epoch={requester_epoch}; epochs are not negative")
        size = block_size or self.default_block_size
        if not 1 <= size <= MAX_BLOCK_SIZE:
            raise InvalidRequest(f"block_size={block_size}; ask for 1..{MAX_BLOCK_SIZE} ids, or 0 for the default")
        first, last = self.store.reserve(requester_id, requester_epoch, size)
        return ProducerIdBlock(first, last)
