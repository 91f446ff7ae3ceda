"""Where a launch's ranks meet: a port on 127.0.0.1 that nobody else can take."""

from __future__ import annotations


def listening_socket() -> tuple[int, int]:
    """A TCP socket listening on 127.0.0.1 at a port the OS picked: ``(port, fd)``.

    The only free-port helper of the course: a socket that already listens
    cannot be taken by anyone else, unlike a port number looked up and
    released.
    """
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock.getsockname()[1], sock.detach()
