"""A Primer node's settings and the names it accepts: one frozen value, checked once."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lab.backends.primer.core.errors import BadRequest

SYNC, CHAIN = "sync", "chain"
OFF, AOF = "off", "aof"
#: a queue's, a log's or a group's name: it is also a file name on the node's disk
NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
HEARTBEAT_S = 0.1  # seconds between liveness beats to every peer
#: seconds without a beat (or any message) before a peer counts as down: the failure
#: detector's timeout (the ``suspect_after`` option). On a busy machine a node's beats arrive
#: late when the sender, the receiver or the proxy between them waits for a core, so the
#: default leaves room for the longest silence measured on a loaded 2-core machine
#: (docs/designs/primer.md, "The failure detector"); it is also how long a split goes unnoticed.
SUSPECT_AFTER_S = 1.0


def check_name(kind: str, name: str) -> str:
    """``name`` if it may name a queue, a log or a group; else BadRequest saying why."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in (".", ".."):
        raise BadRequest(f"bad {kind} name {name!r}: use 1 to 200 of A-Z a-z 0-9 . _ -")
    return name


@dataclass(frozen=True)
class NodeConfig:
    """One node's settings. Every member of a cluster should have the same ``replicas``,
    ``replication`` and ``persistence``; each node applies its own to the puts it takes."""

    name: str
    #: the other members, known at boot (full mesh); a node named by a peer's gossip joins too
    peers: tuple[str, ...] = ()
    replicas: int = 2  # W: copies of each message, this node's among them
    replication: str = SYNC  # sync: all W in parallel; chain: head -> ... -> tail, the tail acknowledges
    persistence: str = OFF  # aof: an append-only file per queue and log, fsynced before a copy counts
    timeout: float = 1.0  # seconds a call to a peer may take
    lease: float = 5.0  # seconds an at-least-once get leases a message for
    heartbeat: float = HEARTBEAT_S  # seconds between liveness beats to every peer
    suspect_after: float = SUSPECT_AFTER_S  # seconds without a beat before a peer counts as down
    lazy_tick: float = 0.02  # seconds between flushes of Plumtree's lazy i-have announcements
    exchange_tick: float = 0.5  # seconds between anti-entropy exchanges with a random peer
    range_size: int = 1000  # records per log range
    members: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        check_name("node", self.name)
        if self.name in self.peers:
            raise ValueError(f"node {self.name!r} lists itself among its peers")
        if self.replication not in (SYNC, CHAIN):
            raise ValueError(f"replication {self.replication!r}: use sync or chain")
        if self.persistence not in (OFF, AOF):
            raise ValueError(f"persistence {self.persistence!r}: use off or aof")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"replicas {self.replicas!r}: use a whole number >= 1")
        for name in ("timeout", "lease", "heartbeat", "suspect_after", "lazy_tick", "exchange_tick"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} {getattr(self, name)!r}: use a number of seconds > 0")
        if not self.suspect_after > self.heartbeat:  # else a peer is down between any two of its beats
            raise ValueError(f"suspect_after {self.suspect_after!r}: use more seconds than the heartbeat "
                             f"({self.heartbeat:g} s)")
        if not isinstance(self.range_size, int) or self.range_size < 1:
            raise ValueError(f"range_size {self.range_size!r}: use a whole number >= 1")
        object.__setattr__(self, "members", tuple(sorted({self.name, *self.peers})))
