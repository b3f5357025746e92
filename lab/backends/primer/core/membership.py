"""Who is in the cluster, and who is up: full-mesh membership and a heartbeat failure detector.

Members are a grow-only set merged by union (every beat carries the sender's set), so a
node named by any member joins everyone's view. Liveness is each node's own opinion: a
peer is up while a beat (or any message) from it came within ``suspect_after`` seconds.
A node starts out trusting every member (up since its boot), so puts right after a boot
do not fail while the first beats are on their way. Leaving the cluster is not modelled.

Each node also keeps, per peer, the longest silence it has heard end (the gap between two
messages from it): how near the detector came to suspecting a peer that was up all along.
Both are in the node's view (``GET /cluster``), and a silence past ``suspect_after`` is
logged (INFO) when it ends: a put refused for want of up members on a machine with no
fault can be traced to the gap that caused it.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from lab.backends.primer.core.config import NodeConfig
from lab.backends.primer.core.messages import Beat
from lab.design.runtime import Runtime

SELF, UP, DOWN = "self", "up", "down"
log = logging.getLogger(__name__)


class Membership:
    def __init__(self, rt: Runtime, config: NodeConfig):
        self.rt, self.config = rt, config
        self.name = config.name
        self.members: set[str] = set(config.members)
        booted = rt.now()
        self.last_seen: dict[str, float] = {peer: booted for peer in self.members if peer != self.name}
        #: per peer, the longest gap between two messages heard from it (seconds); the wait
        #: for a peer's first message is no silence (peers boot one after another)
        self.longest_silence: dict[str, float] = {}
        #: per peer, how many silences lasted past ``suspect_after`` (it counted as down meanwhile)
        self.suspicions: dict[str, int] = {}

    def peers(self) -> list[str]:
        """Every other member, sorted."""
        return sorted(self.members - {self.name})

    def up(self, peer: str) -> bool:
        if peer == self.name:
            return True
        seen = self.last_seen.get(peer)
        return seen is not None and self.rt.now() - seen <= self.config.suspect_after

    def up_peers(self) -> list[str]:
        return [peer for peer in self.peers() if self.up(peer)]

    def heard(self, peer: str) -> None:
        """Any message from ``peer`` shows it is up."""
        if peer != self.name:
            if peer not in self.members:
                self.merge((peer,))
            now = self.rt.now()
            silence = now - self.last_seen[peer] if peer in self.longest_silence else 0.0
            if silence >= self.longest_silence.get(peer, 0.0):
                self.longest_silence[peer] = silence
            if silence > self.config.suspect_after:
                self.suspicions[peer] = self.suspicions.get(peer, 0) + 1
                log.info("primer %s: heard %s again after %.3f s of silence (suspect_after %g s: it counted "
                         "as down)", self.name, peer, silence, self.config.suspect_after)
            self.last_seen[peer] = now

    def merge(self, members: Iterable[str]) -> None:
        for member in members:
            if member not in self.members:
                self.members.add(member)
                self.last_seen.setdefault(member, self.rt.now())

    def on_beat(self, peer: str, beat: Beat) -> None:
        self.merge(beat.members)
        self.heard(peer)

    async def run(self) -> None:
        """Beat to every peer, forever."""
        while True:
            beat = Beat(tuple(sorted(self.members)))
            for peer in self.peers():
                self.rt.net.send(peer, beat)
            await self.rt.sleep(self.config.heartbeat)

    def view(self) -> list[dict[str, Any]]:
        now = self.rt.now()
        return [{"name": m, "state": SELF if m == self.name else (UP if self.up(m) else DOWN),
                 "last_seen_s": None if m == self.name else round(now - self.last_seen.get(m, now), 3),
                 "longest_silence_s": None if m == self.name else round(self.longest_silence.get(m, 0.0), 3),
                 "suspicions": None if m == self.name else self.suspicions.get(m, 0)}
                for m in sorted(self.members)]
