"""free_port: the port a test server is told to listen on before it starts.

A port of the kernel's ephemeral range can be taken between the choice and the server's bind by any outgoing
connection on the machine (a two-gateway test once failed that way: the second gateway's port had become some
client's local port). The ports handed out therefore lie outside that range, bind, and are never handed out twice.
"""

from __future__ import annotations

import socket

from oncelog.testing.servers import _ephemeral_ports, free_port


def test_ports_lie_outside_the_ephemeral_range_and_are_never_repeated() -> None:
    ephemeral = _ephemeral_ports()
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert not [p for p in ports if p in ephemeral]


def test_outgoing_connections_never_land_on_a_handed_out_port() -> None:
    """Open many client connections (each gets an ephemeral local port): none uses a port free_port chose."""
    chosen = {free_port() for _ in range(100)}
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(256)
        clients = [socket.create_connection(server.getsockname()) for _ in range(200)]
        try:
            local_ports = {c.getsockname()[1] for c in clients}
        finally:
            for client in clients:
                client.close()
    assert not local_ports & chosen
