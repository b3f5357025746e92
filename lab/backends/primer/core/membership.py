"""Who is in the cluster, and who is up: full-mesh membership and a heartbeat failure detector.

Members are a grow-only set merged by union (every beat carries the sender's set), so a
node named by any member joins everyone's view. Liveness is each node's own opinion: a
peer is up while a beat (or any message) from it came within ``suspect_after`` seconds.
A node starts out trusting every member (up since its boot), so puts right after a boot
do not fail while the first beats are on their way. Leaving the cluster is not modelled.
"""

from __future__ import annotations

from typing import Any, Iterable

from lab.backends.primer.core.config import NodeConfig
from lab.backends.primer.core.messages import Beat
from lab.runtime import Runtime

SELF, UP, DOWN = "self", "up", "down"


class Membership:
    def __init__(self, rt: Runtime, config: NodeConfig):
        self.rt, self.config = rt, config
        self.name = config.name
        self.members: set[str] = set(config.members)
        booted = rt.now()
        self.last_seen: dict[str, float] = {peer: booted for peer in self.members if peer != self.name}

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
            self.last_seen[peer] = self.rt.now()

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
                 "last_seen_s": None if m == self.name else round(now - self.last_seen.get(m, now), 3)}
                for m in sorted(self.members)]
