"""What Primer nodes say to each other: one frozen dataclass per message.

Plain values only (strings, numbers, bytes, tuples), so the live world's frames carry them
between processes and the sim world passes them by reference. Grouped by room: liveness,
the Plumtree broadcast, anti-entropy, queue replicas, log chains.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# ------------------------------------------------------------------ liveness


@dataclass(frozen=True)
class Beat:
    """I am up; these are the members I know (membership is a grow-only set, merged by union)."""

    members: tuple[str, ...]


# ------------------------------------------------------------------ Plumtree (helium/plumtree's messages)


@dataclass(frozen=True)
class Gossip:
    """Eager push: the whole broadcast. ``root`` is the node that started it."""

    root: str
    msg_id: str
    handler: str
    payload: Any
    round: int


@dataclass(frozen=True)
class IHave:
    """Lazy push: ids of broadcasts the sender has, as ``(root, msg_id, handler, round)``."""

    items: tuple[tuple[str, str, str, int], ...]


@dataclass(frozen=True)
class Graft:
    """I missed ``msg_id``: send it, and push ``root``'s broadcasts to me eagerly from now on."""

    root: str
    msg_id: str
    handler: str
    round: int


@dataclass(frozen=True)
class Prune:
    """I got ``root``'s broadcast twice: push only i-haves to me for that root."""

    root: str


@dataclass(frozen=True)
class Exchange:
    """Anti-entropy: a handler's digest, then (when digests differ) its summary; the reply
    says what the caller lacks and what the callee wants (``lab.backends.primer.core.broadcast``)."""

    handler: str
    digest: int
    summary: Any = None


@dataclass(frozen=True)
class Deliver:
    """Anti-entropy's push: broadcast payloads the receiver lacks, merged without re-broadcast."""

    handler: str
    payloads: tuple[Any, ...]


# ------------------------------------------------------------------ queue replicas


@dataclass(frozen=True)
class Copy:
    """One replica's copy of a queue message: what a put stores on each of its W replicas."""

    queue: str
    id: str
    origin: str
    seq: int
    put_ns: int
    replicas: tuple[str, ...]
    payload: bytes


@dataclass(frozen=True)
class StoreCopy:
    """Hold this copy (uncommitted until the put's Added broadcast); ``chain``: then pass it
    on to the next node of the chain, and answer once the tail holds it."""

    copy: Copy
    chain: tuple[str, ...] = ()


@dataclass(frozen=True)
class DropCopy:
    """The put failed: forget the uncommitted copy."""

    queue: str
    id: str


@dataclass(frozen=True)
class Claim:
    """Lease (or, ``at_most_once``, take) a message from this replica's copy."""

    queue: str
    id: str
    lease: float
    at_most_once: bool


@dataclass(frozen=True)
class LeaseNote:
    """A replica granted (``until`` > now) or ended (``until`` 0) a lease: the others hold off."""

    queue: str
    id: str
    token: str
    until: float


@dataclass(frozen=True)
class AckMessage:
    """Acknowledge (``release`` False) or release a message leased with ``token``."""

    queue: str
    id: str
    token: str
    release: bool = False


# ------------------------------------------------------------------ log chains


@dataclass(frozen=True)
class AppendRecord:
    """To a log's current head: append this record (or, with ``chain``, a replica's append
    of record ``offset`` of a range, passed on down the chain)."""

    log: str
    payload: bytes
    offset: int = -1
    put_ns: int = 0
    chain: tuple[str, ...] = ()


@dataclass(frozen=True)
class LastOffset:
    """The highest offset of ``log`` this node holds (-1: none): a takeover starts after it."""

    log: str


@dataclass(frozen=True)
class ReadRecords:
    """The records of ``log`` from ``first`` up to ``last`` this node holds."""

    log: str
    first: int
    last: int
