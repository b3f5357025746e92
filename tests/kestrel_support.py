"""Test support for Kestrel: a raw socket client (the server process is lab's own)."""

from __future__ import annotations

import socket
import time

import pytest

from lab.backends.kestrel.process import KestrelProcess

__all__ = ["KestrelProcess", "Raw", "server_fixtures", "stats", "wait_for"]


class Raw:
    """A raw TCP client: send bytes, read lines and replies, see the server close."""

    def __init__(self, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data: bytes | str) -> "Raw":
        self.sock.sendall(data.encode("latin-1") if isinstance(data, str) else data)
        return self

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        self.buf += chunk
        return bool(chunk)

    def line(self) -> str:
        while b"\r\n" not in self.buf and b"\n" not in self.buf:
            if not self._fill():
                raise ConnectionError(f"closed; unread {self.buf!r}")
        sep = b"\r\n" if b"\r\n" in self.buf and self.buf.index(b"\r\n") <= self.buf.index(b"\n") else b"\n"
        line, self.buf = self.buf.split(sep, 1)
        return line.decode("latin-1")

    def until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            if not self._fill():
                raise ConnectionError(f"closed; unread {self.buf!r}")
        out, self.buf = self.buf.split(marker, 1)
        return out + marker

    def get(self, key: str) -> bytes | None:
        """``get key``: the value, or None for END."""
        self.send(f"get {key}\r\n")
        first = self.line()
        if first == "END":
            return None
        assert first.startswith("VALUE "), first
        size = int(first.split(" ")[3])
        while len(self.buf) < size + 2 + 5:
            if not self._fill():
                raise ConnectionError("closed inside a value")
        data, rest = self.buf[:size], self.buf[size + 2:]
        assert rest.startswith(b"END\r\n"), rest[:20]
        self.buf = rest[5:]
        return data

    def set(self, queue: str, data: bytes | str, exptime: int = 0) -> str:
        data = data.encode("latin-1") if isinstance(data, str) else data
        self.send(b"set %s 0 %d %d\r\n%s\r\n" % (queue.encode(), exptime, len(data), data))
        return self.line()

    def closed(self, wait: float = 2.0) -> bool:
        """True if the server closed the connection (nothing more to read)."""
        self.sock.settimeout(wait)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
                self.buf += chunk
        except (socket.timeout, TimeoutError):
            return False
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def stats(port: int) -> dict[str, str]:
    """The memcache ``stats`` of the server on ``port``, name -> value."""
    c = Raw(port)
    c.send("stats\r\n")
    out = {}
    while (line := c.line()) != "END":
        _, key, value = line.split(" ", 2)
        out[key] = value
    c.close()
    return out


def wait_for(predicate, timeout: float = 5.0, step: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def server_fixtures(config: str):
    """A module's fixtures: ``server``, one Kestrel process with ``config`` for the whole
    module, and ``raw``, which connects Raw clients to it (port: another of its ports) and
    closes them after the test."""

    @pytest.fixture(scope="module")
    def server(tmp_path_factory):
        proc = KestrelProcess(tmp_path_factory.mktemp("kestrel") / "queues", config).start()
        yield proc
        proc.stop()

    @pytest.fixture
    def raw(server):
        clients: list[Raw] = []

        def connect(port: int | None = None) -> Raw:
            clients.append(Raw(port or server.port))
            return clients[-1]

        yield connect
        for c in clients:
            c.close()

    return server, raw
