"""Message bodies: each carries its id ``<producer>:<seq>`` and its put time.

A body is one ASCII header line ``<msg_id> <put_ns>\\n`` padded to the workload's
message size, so any design can carry it (memcache values, HTTP bodies, log records)
and a consumer can tell who sent it, in which order, and when — for the checker and
for end-to-end latency — without a side channel.
"""

from __future__ import annotations

import hashlib


def message_id(producer: str, seq: int) -> str:
    return f"{producer}:{seq}"


def split_id(msg_id: str) -> tuple[str, int]:
    """``"p3:17"`` -> ``("p3", 17)``; a ValueError for anything else."""
    producer, _, seq = msg_id.rpartition(":")
    if not producer or not seq.isdigit():
        raise ValueError(f"not a message id: {msg_id!r}")
    return producer, int(seq)


def encode(msg_id: str, put_ns: int, size: int) -> bytes:
    """The body of message ``msg_id``; at least the header, else padded to ``size`` bytes."""
    header = f"{msg_id} {put_ns}\n".encode("ascii")
    return header + b"." * max(0, size - len(header))


def decode(body: bytes) -> tuple[str, int | None]:
    """``(msg_id, put_ns)`` of a body; a body the lab did not write gets a stable
    ``?<digest>`` id (the checker reports it as unexpected) and no put time — or, all zero
    bytes, ``?zeros-<size>``: what a log replays where a record's header was written and its
    body never was (a preallocated file reads zeros there), so a reader of the verdict sees
    what came back."""
    if body and not body.strip(b"\0"):
        return f"?zeros-{len(body)}", None
    line, newline, _ = body.partition(b"\n")
    parts = line.split(b" ")
    if newline and len(parts) == 2 and parts[1].isdigit():
        try:
            msg_id = parts[0].decode("ascii")
            split_id(msg_id)
            return msg_id, int(parts[1])
        except (UnicodeDecodeError, ValueError):
            pass
    return "?" + hashlib.blake2b(body, digest_size=8).hexdigest(), None
