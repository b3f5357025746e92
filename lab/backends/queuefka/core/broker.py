"""Queuefka's queue core: topics as segment logs, consumer groups, blocking fetches, retention.

Runs through the Runtime only (the disk through ``RuntimeStore``), so the same core is the
engine of the node's HTTP front (``wire.http``) in both worlds. A produce is acknowledged once its records are handed to the
disk, and — if the fsync policy asks for it — once the fsync completes; a commit always
waits for its fsync. What callers exchange with it (its ``Config``, a fetch's answer, the
refusals) is ``core.broker_api``; a group's position and leases are ``core.leases``.

A group's readers share its position, as the consumers of a Kafka share group share a
partition: each fetch hands out the next records, leased to the fetching ``Session`` (the
HTTP front makes one per connection) until they are acknowledged. A commit of address A
acknowledges the records before A in the fetch A points into, and every earlier fetch of
the committing session wholly before A — never records leased to another session, nor
ones handed back. The group's committed offset is its first record not acknowledged (the
share-partition start offset); each commit also records how far records were handed out
and which of them are not acknowledged (a share partition's in-flight state), so a crash or
restart hands out again what was not acknowledged and nothing that was, and a commit cannot
skip records another reader has not processed. Records
leased to a session that closes its connection, or is idle for ``session_timeout``, are
handed out again (their fetch's reply may never have arrived).

Leases live in memory, so none survives a restart, and a commit must not be taken for one
it never made: an address from a fetch before the restart may lie past every record handed
out since (it would skip them), inside another reader's fetch (it would acknowledge records
nobody processed), or — where the crash lost the log's unsynced tail — on a new record
written at the same bytes. So each incarnation of the broker has an ``epoch``, which every
fetch reports; a commit that brings another epoch, or an address past every record handed
out, is ``LeaseLost`` and acknowledges nothing (as a Kafka share group refuses an
acknowledgement once its acquisition lock is gone): the reader drops what it holds from
that fetch, and the records are handed out again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from lab.backends.queuefka.core.broker_api import (
    MAX_FETCH, BadRequest, Config, Fetched, GroupExists, LeaseLost, UnknownGroup, UnknownTopic, check_group,
    check_topic_name,
)
from lab.backends.queuefka.core.framing import segment_base, segment_name
from lab.backends.queuefka.core.groups import GROUP_SUFFIX, MODES, Consumer, apply_retention, clamp_commits, committed_offsets
from lab.backends.queuefka.core.leases import GroupState, Session, hand_back_expired, persist, restore, take
from lab.backends.queuefka.core.reader import Reader
from lab.design.storage import RuntimeStore
from lab.backends.queuefka.core.writer import Writer
from lab.design.runtime import Runtime

EPOCH_MASK = (1 << 62) - 1  # an epoch is a JSON-safe non-negative integer


def is_segment(name: str) -> bool:
    return name.endswith(".slab")


def _log_start(store: RuntimeStore) -> int:
    """The address of the oldest record kept (retention deletes segments from the front)."""
    return min((b for b in map(segment_base, store.names()) if b is not None), default=0)


def _group_file(group: str) -> Callable[[str], bool]:
    """The group's offsets file — not its compaction copy, whose fsync no commit needs
    (the copy is swapped in only once durable): a commit waits for its own fsync alone."""
    return lambda name: name == group + GROUP_SUFFIX


@dataclass
class _Topic:
    name: str
    store: RuntimeStore
    writer: Writer
    arrived: Any  # a Runtime event, replaced after every produce
    groups: dict[str, GroupState] = field(default_factory=dict)
    recovered: bool = False  # group commits were cut back to the log's end: settle them before appending


class QueuefkaCore:
    """The topics of one node, under the root of its Runtime disk."""

    def __init__(self, rt: Runtime, config: Config | None = None):
        self.rt = rt
        self.config = config or Config()
        self.topics: dict[str, _Topic] = {}
        self._local = Session(rt.now())  # the one session of callers that name none
        #: this incarnation, different from every other: the boot time (a restarted live
        #: process draws the same seeded numbers) and a draw (two sim nodes share the clock)
        self.epoch = (rt.now_ns() ^ rt.random.getrandbits(62)) & EPOCH_MASK

    def session(self) -> Session:
        """A new reader session (a connection's)."""
        return Session(self.rt.now())

    def end_session(self, session: Session) -> None:
        """The session is gone (its connection closed): what it held is handed out again now."""
        session.closed = True
        for topic in self.topics.values():
            handed_back = False
            for state in topic.groups.values():
                for lease in state.leases:
                    if lease.holder is session:
                        lease.holder = None
                        handed_back = True
            if handed_back:  # wake the fetches that wait
                arrived, topic.arrived = topic.arrived, self.rt.event()
                arrived.set()

    def exists(self, name: str) -> bool:
        """Whether topic ``name`` has a log (a folder with no segment is not a topic)."""
        return name in self.topics or any(map(is_segment, RuntimeStore(self.rt, name).names()))

    def topic_names(self) -> list[str]:
        """Every topic with a log on this node's disk."""
        return sorted(n for n in RuntimeStore(self.rt, "").names() if self.exists(n))

    def topic(self, name: str, create: bool = True) -> _Topic:
        """The open topic ``name``; only ``create`` makes a new one, else ``UnknownTopic``."""
        topic = self.topics.get(name)
        if topic is None:
            check_topic_name(name)
            if not create and not self.exists(name):
                raise UnknownTopic(f"no topic {name!r}")
            store = RuntimeStore(self.rt, name)
            writer = Writer(store, self.config.segment_size_hint, fsync=self.config.fsync, clock=self.rt.now)
            # Recovery: a group committed past the end the log recovered to (a crash lost its
            # unsynced tail) is committed at that end before a record is written there.
            recovered = bool(clamp_commits(store, writer.address))
            topic = self.topics[name] = _Topic(name, store, writer, self.rt.event(), recovered=recovered)
        return topic

    async def produce(self, name: str, payloads: tuple[bytes, ...] | list[bytes]) -> list[int]:
        """Append ``payloads``; their addresses, once as durable as the fsync policy says."""
        topic = self.topic(name)
        if topic.recovered:  # the cut-back commits are durable before any record lands behind them
            await topic.store.settle(lambda file: file.endswith(GROUP_SUFFIX))
            topic.recovered = False
        addresses = topic.writer.write_many(list(payloads)) if len(payloads) > 1 else [topic.writer.write(payloads[0])]
        topic.writer.flush()  # readers (consumer groups) see the bytes now
        await topic.store.settle(is_segment)  # not a consumer's commit: only the log's fsyncs
        arrived, topic.arrived = topic.arrived, self.rt.event()
        arrived.set()
        return addresses

    def _group(self, topic: _Topic, group: str) -> GroupState:
        """The group's reading state (in memory; its file only exists once it commits).
        Its ``Consumer`` only reads and records commits: the leases here decide them."""
        state = topic.groups.get(group)
        if state is None:
            state = topic.groups[group] = GroupState(Consumer(topic.store, group, MODES[0]))
            restore(state, topic.writer)
        return state

    async def fetch(self, name: str, group: str, max_count: int = 1, wait: float = 0.0,
                    mode: str = "at-least-once", session: Session | None = None) -> Fetched:
        """Up to ``max_count`` records for ``group``, waiting up to ``wait`` seconds for one:
        records handed back first, then the next ones. At-least-once leases them to
        ``session`` until it commits them; at-most-once acknowledges them before returning."""
        if mode not in MODES:
            raise BadRequest(f"mode {mode!r}: use {' or '.join(MODES)}")
        if not 1 <= max_count <= MAX_FETCH:
            raise BadRequest(f"max {max_count}: use 1 to {MAX_FETCH}")
        check_group(group)
        topic = self.topic(name, create=False)
        state = self._group(topic, group)
        session = self._local if session is None else session
        deadline = self.rt.now() + max(0.0, wait)
        while True:
            if topic.groups.get(group) is not state:  # deleted while this fetch waited
                return Fetched([], state.consumer.position, self.epoch)
            session.seen = self.rt.now()  # a session waiting in a fetch is alive
            expires = hand_back_expired(state, self.rt.now(), self.config.session_timeout)
            records, next_address = take(topic.store, state, max_count, None if mode == MODES[1] else session)
            if records:
                if mode == MODES[1]:  # at-most-once: acknowledged before they are handed out
                    persist(state)
                    await topic.store.settle(_group_file(group))
                return Fetched(records, next_address, self.epoch)
            remaining = deadline - self.rt.now()
            if remaining <= 0:
                return Fetched([], state.consumer.position, self.epoch)
            if expires is not None:  # wake when another session's lease runs out
                remaining = min(remaining, max(expires - self.rt.now(), 1e-3))
            await self.rt.wait(topic.arrived, remaining)


    async def commit(self, name: str, group: str, address: int, session: Session | None = None,
                     epoch: int | None = None) -> int:
        """Acknowledge up to ``address`` (a record address, or the end of the log) for
        ``group``: the records before it in the fetch it points into, and ``session``'s
        earlier fetches before it. ``epoch`` is the fetch's (None: not checked); another
        incarnation's, or an address past every record handed out, is ``LeaseLost``. The
        group's committed offset: its first record not acknowledged."""
        check_group(group)
        topic = self.topic(name, create=False)
        self._check_commit_address(topic, address)  # before the group exists: a refusal writes nothing
        if epoch is not None and epoch != self.epoch:
            raise LeaseLost(f"lease lost: address {address} of group {group!r} in topic {name!r} was fetched "
                            f"from an earlier incarnation of the broker (epoch {epoch}; it restarted since, "
                            f"now epoch {self.epoch}): nothing was acknowledged, and what was not is handed "
                            "out again")
        new = group not in topic.groups
        state = self._group(topic, group)
        if address > state.consumer.position:  # never handed out: a commit cannot skip records
            if new:  # a refusal leaves no trace, not even the group's reading state
                state.consumer.close()
                del topic.groups[group]
            raise LeaseLost(f"lease lost: address {address} of group {group!r} in topic {name!r} is past every "
                            f"record handed out since the broker started ({state.consumer.position}): its fetch "
                            "came before a restart, or it was never fetched (PUT the group to start it "
                            "elsewhere); nothing was acknowledged")
        session = self._local if session is None else session
        session.seen = self.rt.now()
        for lease in state.leases:
            if lease.start < address <= lease.end:  # the fetch it points into
                lease.start = address
            elif lease.end <= address and lease.holder is session:  # this session's earlier fetches
                lease.start = lease.end
        state.leases = [lease for lease in state.leases if lease.start < lease.end]
        persist(state)
        await topic.store.settle(_group_file(group))
        return state.consumer.committed

    async def create_group(self, name: str, group: str, start: int | str = "beginning") -> int:
        """Create ``group`` committed at ``start``: "beginning" (the oldest record kept), "end"
        (only records written from now on) or a record address; its committed offset."""
        check_group(group)
        topic = self.topic(name, create=False)
        if topic.store.exists(group + GROUP_SUFFIX):
            raise GroupExists(f"group {group!r} already exists in topic {name!r}: delete it first")
        if start == "beginning":
            address = _log_start(topic.store)
        elif start == "end":
            topic.writer.flush()
            address = topic.writer.address
        elif isinstance(start, int) and not isinstance(start, bool):
            self._check_commit_address(topic, start)
            address = start
        else:
            raise BadRequest(f"start {start!r}: use \"beginning\", \"end\" or a record address")
        state = self._group(topic, group)
        state.consumer.commit(address)
        state.consumer.rewind()  # reads before it was created do not count
        state.leases.clear()
        await topic.store.settle(_group_file(group))
        return state.consumer.committed

    async def delete_group(self, name: str, group: str) -> None:
        """Remove ``group``: its file and its state, so it no longer holds retention."""
        check_group(group)
        topic = self.topic(name, create=False)
        file = group + GROUP_SUFFIX
        if not topic.store.exists(file):
            raise UnknownGroup(f"no group {group!r} in topic {name!r}")
        state = topic.groups.pop(group, None)
        if state is not None:
            state.consumer.close()
        for leftover in (file, file + ".tmp"):  # .tmp: a compaction under way
            if topic.store.exists(leftover):
                topic.store.remove(leftover)
        topic.store.sync_names()

    def _check_commit_address(self, topic: _Topic, address: int) -> None:
        topic.writer.flush()
        end = topic.writer.address
        if not isinstance(address, int) or address < 0 or address > end:
            raise BadRequest(f"address {address!r} is not in topic {topic.name!r} (0 to {end})")
        if address < end:  # it must be where a record starts
            try:
                with Reader(topic.store, address) as reader:
                    if reader.read() is None:
                        raise ValueError("no record")
            except ValueError:  # AddressError, CorruptRecord
                raise BadRequest(f"address {address} is not a record address in topic {topic.name!r}") from None

    def stats(self, name: str) -> dict[str, Any]:
        topic = self.topic(name, create=False)
        topic.writer.flush()
        bases = sorted(b for b in map(segment_base, topic.store.names()) if b is not None)
        end = topic.writer.address
        groups = committed_offsets(topic.store)  # the groups that exist: those that hold retention
        groups.update({g: s.consumer.committed for g, s in topic.groups.items() if s.consumer.offset.exists})
        return {
            "topic": name,
            "segments": len(bases),
            "first_address": bases[0] if bases else 0,
            "end_address": end,
            "bytes": sum(topic.store.size(segment_name(b)) for b in bases),
            "groups": {g: {"committed": c, "lag_bytes": end - c,
                           "position": topic.groups[g].consumer.position if g in topic.groups else c}
                       for g, c in sorted(groups.items())},
        }

    async def retain(self) -> list[str]:
        """Apply retention to every open topic once; the deleted segments."""
        if self.config.retention_age is None:
            return []
        deleted = []
        for topic in self.topics.values():
            gone = apply_retention(topic.store, self.config.retention_age)
            deleted += [f"{topic.name}/{n}" for n in gone]
            if gone:  # a reader that never committed held nothing back: move it past the gap
                start = _log_start(topic.store)
                for state in topic.groups.values():
                    if state.consumer.position < start:
                        state.consumer.rewind()
                    for lease in state.leases:
                        lease.start = max(lease.start, min(lease.end, start))
                    state.leases = [lease for lease in state.leases if lease.start < lease.end]
        return deleted

    async def run_retention(self) -> None:
        """Apply retention every ``retention_interval`` seconds (spawn it at boot)."""
        while self.config.retention_age is not None:
            await self.rt.sleep(self.config.retention_interval)
            await self.retain()

    def close(self) -> None:
        for topic in self.topics.values():
            for state in topic.groups.values():
                state.consumer.close()
            topic.writer.close()
            topic.store.close()
        self.topics.clear()
