"""The message index: which messages of each queue exist in the cluster and where their
replicas are — the "message metadata" every node reads before a get (slides S13, S14).

A put broadcasts ``Added`` once its W replicas hold the message; an ack broadcasts
``Acked``, which leaves a tombstone (kept ``tombstone_ttl`` seconds) so that a late or
repaired ``Added`` cannot bring an acknowledged message back. Anti-entropy swaps the ids
each side still holds: the callee answers with what the caller lacks and the acks it has
for the caller's ids; the caller pushes back what the callee lacks, and an ack for any
``Added`` it is sent that it had tombstoned.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

from lab.design.runtime import Runtime


@dataclass(frozen=True)
class Added:
    queue: str
    id: str
    replicas: tuple[str, ...]
    put_ns: int
    origin: str
    seq: int

    @property
    def msg_id(self) -> str:
        return "a:" + self.id

    @property
    def order(self) -> tuple[int, str, int]:
        return self.put_ns, self.origin, self.seq


@dataclass(frozen=True)
class Acked:
    queue: str
    id: str

    @property
    def msg_id(self) -> str:
        return "k:" + self.id


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


class MessageIndex:
    name = "msgs"

    def __init__(self, rt: Runtime, tombstone_ttl: float):
        self.rt = rt
        self.tombstone_ttl = tombstone_ttl
        self.entries: dict[str, dict[str, Added]] = {}  # queue -> id -> Added
        self.tombstones: dict[str, float] = {}  # id -> when its ack was seen here
        self.on_added: Callable[[Added], None] = lambda added: None
        self.on_acked: Callable[[Acked], None] = lambda acked: None
        self._digest = 0

    def live(self, queue: str) -> dict[str, Added]:
        return self.entries.get(queue, {})

    def known(self, message_id: str, queue: str) -> Added | None:
        return self.entries.get(queue, {}).get(message_id)

    def acked(self, message_id: str) -> bool:
        return message_id in self.tombstones

    # ------------------------------------------------------------------ Handler
    def merge(self, msg_id: str, payload: Added | Acked) -> bool:
        if payload.id in self.tombstones:
            return False
        if isinstance(payload, Acked):
            self.tombstones[payload.id] = self.rt.now()
            if self.entries.get(payload.queue, {}).pop(payload.id, None) is not None:
                self._digest -= _crc(payload.id)
            self.on_acked(payload)
            return True
        queue = self.entries.setdefault(payload.queue, {})
        if payload.id in queue:
            return False
        queue[payload.id] = payload
        self._digest += _crc(payload.id)
        self.on_added(payload)
        return True

    def seen(self, msg_id: str) -> bool:
        message_id = msg_id[2:]
        return message_id in self.tombstones or (msg_id.startswith("a:") and any(
            message_id in queue for queue in self.entries.values()))

    def digest(self) -> int:
        return self._digest & (2**64 - 1)

    def summary(self) -> dict[str, tuple[str, ...]]:
        return {queue: tuple(ids) for queue, ids in sorted(self.entries.items()) if ids}

    def reconcile(self, summary: dict[str, tuple[str, ...]]) -> tuple[list[Any], dict[str, list[str]]]:
        give: list[Any] = []
        want: dict[str, list[str]] = {}
        for queue, ids in summary.items():
            mine = self.entries.get(queue, {})
            for message_id in ids:
                if message_id in self.tombstones:
                    give.append(Acked(queue, message_id))
                elif message_id not in mine:
                    want.setdefault(queue, []).append(message_id)
        for queue, mine in sorted(self.entries.items()):
            theirs = set(summary.get(queue, ()))
            give += [added for message_id, added in mine.items() if message_id not in theirs]
        return give, want

    def absorb(self, payloads: list[Any], want: dict[str, list[str]]) -> list[Any]:
        back: list[Any] = []
        for payload in payloads:
            if not self.merge(payload.msg_id, payload) and isinstance(payload, Added) and payload.id in self.tombstones:
                back.append(Acked(payload.queue, payload.id))
        for queue, ids in want.items():
            mine = self.entries.get(queue, {})
            back += [mine[i] if i in mine else Acked(queue, i) for i in ids if i in mine or i in self.tombstones]
        return back

    def expire(self) -> None:
        """Forget tombstones older than the ttl."""
        horizon = self.rt.now() - self.tombstone_ttl
        if self.tombstones and next(iter(self.tombstones.values())) < horizon:
            self.tombstones = {i: t for i, t in self.tombstones.items() if t >= horizon}
