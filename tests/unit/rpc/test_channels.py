"""Channel options and the per-address channel pool (``oncelog.rpc.channels``), and the client library's channels
built on them (``oncelog.client.transport.Channels``)."""

from __future__ import annotations

import pytest

from oncelog.client.errors import IllegalStateError
from oncelog.client.transport import Channels
from oncelog.rpc import ChannelPool
from oncelog.rpc.channels import aio_channel_options


def test_service_channels_retry_unavailable_and_the_client_librarys_do_not() -> None:
    services = dict(aio_channel_options())
    assert services["grpc.enable_retries"] == 1 and "UNAVAILABLE" in services["grpc.service_config"]
    client = dict(aio_channel_options(retries=False, extra_options=[("grpc.max_reconnect_backoff_ms", 1_000)]))
    assert client["grpc.enable_retries"] == 0 and "grpc.service_config" not in client
    assert client["grpc.max_reconnect_backoff_ms"] == 1_000
    assert [key for key, _ in aio_channel_options(retries=False)].count("grpc.enable_retries") == 1


async def test_the_clients_channels_are_a_pool_one_channel_per_address_closed_together() -> None:
    channels = Channels()
    assert isinstance(channels, ChannelPool)
    first = channels.get("127.0.0.1:1")
    assert channels.get("127.0.0.1:1") is first and channels.get("127.0.0.1:2") is not first
    assert len(channels) == 2
    await channels.close()
    assert len(channels) == 0 and channels.closed
    with pytest.raises(IllegalStateError, match="the client is closed"):
        channels.get("127.0.0.1:1")
    assert len(channels) == 0, "a closed pool opens no channel: nobody would close it"
    await channels.close()


async def test_a_service_pool_opens_nothing_after_close_and_forget_still_works() -> None:
    pool = ChannelPool()
    pool.get("127.0.0.1:1")
    await pool.close()
    with pytest.raises(RuntimeError, match="channel pool is closed"):
        pool.get("127.0.0.1:1")
    await pool.forget("127.0.0.1:1")
    assert len(pool) == 0
