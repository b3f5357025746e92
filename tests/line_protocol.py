"""The tests' server-side line protocol: a ``ServerConnection`` whose requests are lines.
A test's protocol subclasses it and writes only ``handle`` (and ``__init__`` for its state)."""

from __future__ import annotations


class LineConnection:
    """One request per ``\\n``-ended line, decoded; no idle timeout of its own."""

    timeout = None
    idle_resets_on_data = True
    buffer = b""

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def next_request(self) -> str | None:
        line, sep, rest = self.buffer.partition(b"\n")
        if not sep:
            return None
        self.buffer = rest
        return line.decode()
