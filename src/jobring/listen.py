"""The listening socket of the admin and of the executor, taken before anything else
starts, so a taken port fails at once with a message that says so."""

from __future__ import annotations

import errno
import socket

from jobring.configbase import ConfigError


class PortInUse(ConfigError):
    """The port is taken by another process; ``hint`` says how to choose another one."""

    def __init__(self, host: str, port: int, hint: str | None = None) -> None:
        text = f"port {port} is in use (listening on {host})"
        super().__init__(f"{text}: {hint}" if hint else text)
        self.host = host
        self.port = port


def listen_socket(host: str, port: int, *, hint: str | None = None, backlog: int = 2048) -> socket.socket:
    """A listening socket on host:port (IPv6 when the host has a colon); :class:`PortInUse`
    when the port is taken, the OSError otherwise."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortInUse(host, port, hint) from exc
        raise
    sock.listen(backlog)
    return sock
