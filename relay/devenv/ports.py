"""Free loopback ports: for servers of a test, a benchmark or a chaos run of their own."""

from __future__ import annotations

import socket

from relay.devenv.workdir import LOOPBACK


def free_ports(count: int) -> list[int]:
    """Distinct loopback ports nobody listens on right now (every socket is held open until
    all are picked, so they are distinct)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    """Whether nothing listens on loopback ``port`` right now."""
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True
