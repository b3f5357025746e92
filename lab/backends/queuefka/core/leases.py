"""Queuefka's leases: a consumer group's shared reading position and the records it
handed out and are not yet acknowledged.

A group's readers share its position, as the consumers of a Kafka share group share a
partition: each fetch hands out the next records, leased to the fetching ``Session`` (the
HTTP front makes one per connection) until they are acknowledged. Records handed back (their
session closed, or was idle too long) are handed out again before the next ones. The group's
committed offset is its first record not acknowledged; each commit also records how far
records were handed out and which of them are not acknowledged, so a restart hands out again
exactly those (``restore``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.backends.queuefka.core.groups import Consumer
from lab.backends.queuefka.core.reader import Reader
from lab.backends.queuefka.core.writer import Writer
from lab.design.storage import RuntimeStore


class Session:
    """One reader of the broker (the HTTP front: one per connection). The records it
    fetched and has not acknowledged are leased to it while it is open and active."""

    __slots__ = ("seen", "closed")

    def __init__(self, now: float):
        self.seen = now  # when it last fetched or committed
        self.closed = False


@dataclass
class Lease:
    """Records fetched and not acknowledged: ``start`` to ``end`` (the address after the
    last), held by ``holder`` — or by nobody (None): handed back, to be handed out again."""

    start: int
    end: int
    holder: Session | None


@dataclass
class GroupState:
    consumer: Consumer  # its reader is the group's shared position; its offset the committed one
    leases: list[Lease] = field(default_factory=list)  # disjoint, in address order, below the position


def restore(state: GroupState, writer: Writer) -> None:
    """A group's state from before a restart, as its last commit recorded it: records
    handed out up to ``handed``, of which ``pending`` were not acknowledged. Those are
    handed out again first (their readers are gone); the acknowledged ones never. A
    crash that lost the log's unsynced tail cut both back to where the log recovered to
    (``clamp_commits``, at the topic's opening: the log may have grown since, at the lost
    tail's addresses, so the log's end now is no bound for them)."""
    offset, consumer = state.consumer.offset, state.consumer
    if offset.handed is None:
        return
    writer.flush()
    start, handed = consumer.position, min(offset.handed, writer.address)
    if handed <= start:
        return
    consumer.reader.seek(handed)
    clipped = ((max(s, start), min(e, handed)) for s, e in offset.pending)
    state.leases = [Lease(s, e, None) for s, e in clipped if s < e]


def persist(state: GroupState) -> None:
    """Commit the group's first record not acknowledged, and with it how far records
    were handed out and which below that are not acknowledged (fsync requested), so a
    restart hands out again exactly those. Commits never move backwards."""
    floor_, consumer = floor(state), state.consumer
    if floor_ >= consumer.committed:
        consumer.offset.commit(floor_, consumer.position, [(lease.start, lease.end) for lease in state.leases])


def hand_back_expired(state: GroupState, now: float, timeout: float) -> float | None:
    """Hand back the leases of sessions closed or idle for ``timeout`` seconds at ``now``;
    when the next of the others runs out (None: no other lease)."""
    nearest = None
    for lease in state.leases:
        holder = lease.holder
        if holder is None:
            continue
        if holder.closed or now - holder.seen > timeout:
            lease.holder = None
        elif nearest is None or holder.seen + timeout < nearest:
            nearest = holder.seen + timeout
    return nearest


def take(store: RuntimeStore, state: GroupState, max_count: int,
         holder: Session | None) -> tuple[list[tuple[int, bytes]], int]:
    """Up to ``max_count`` records and the address after them, from the first lease
    handed back, else from the group's position; leased to ``holder`` (None: acknowledged)."""
    back = next((lease for lease in state.leases if lease.holder is None), None)
    if back is None:
        start = state.consumer.position
        records = state.consumer.poll(max_count)
        if records and holder is not None:
            state.leases.append(Lease(start, state.consumer.position, holder))
        return records, state.consumer.position
    with Reader(store, back.start) as reader:
        records = reader.read_many(max_count)
        after = reader.address
    taken = [r for r in records if r[0] < back.end]
    if len(taken) < len(records):
        after = records[len(taken)][0]
    if holder is not None:
        state.leases.insert(state.leases.index(back), Lease(back.start, after, holder))
    back.start = after
    if back.start >= back.end:
        state.leases.remove(back)
    return taken, after


def floor(state: GroupState) -> int:
    """The group's first record not acknowledged: what it commits."""
    return min((lease.start for lease in state.leases), default=state.consumer.position)
