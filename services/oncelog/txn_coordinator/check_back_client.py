"""GrpcTransactionChecker: the check-back sweep's CheckTransaction calls, through the typed service client.

The :class:`~.check_back.TransactionChecker` of the service: one channel per application address (closed after a
transport failure, so a restarted application is dialled again), and the request made by
:class:`~oncelog.client.services.TransactionCheckClient`. The client interceptors trace each call, as every
other call of the coordinator.
"""

from __future__ import annotations

from oncelog.client.records import PreparedTransaction
from oncelog.client.services import TransactionCheckClient
from oncelog.errors import NetworkException, OncelogError, Reason
from oncelog.rpc import ChannelFactory, ChannelPool

from .check_back import CheckVerdict
from .prepared import PreparedToken

_TRANSPORT = (Reason.NETWORK_EXCEPTION, Reason.REQUEST_TIMED_OUT)


class GrpcTransactionChecker:
    """CheckTransaction over gRPC to an application's TransactionCheckService."""

    def __init__(self, channels: ChannelFactory | None = None) -> None:
        self._channels = ChannelPool(channels)
        self._client = TransactionCheckClient(self._channels.get)

    async def check(self, address: str, token: PreparedToken, timeout_s: float) -> CheckVerdict:
        """See :class:`~.check_back.TransactionChecker`."""
        prepared = PreparedTransaction(token.transactional_id, token.producer_id, token.producer_epoch)
        try:
            verdict = await self._client.check_transaction(address, prepared, timeout_s=timeout_s)
        except OncelogError as error:
            if error.reason in _TRANSPORT:
                await self._channels.forget(address)
            raise
        except OSError as exc:
            await self._channels.forget(address)
            raise NetworkException(f"cannot reach the check-back service at {address}: {exc}") from exc
        return CheckVerdict(verdict)

    async def close(self) -> None:
        """Close every channel."""
        await self._channels.close()


__all__ = ["GrpcTransactionChecker"]
