"""Queuefka's mutants: the broker and its client with one mistake each.

Queuefka with ``fsync=always`` promises that a crash loses no acknowledged put (the reply
waits for the log's fsync), and at-least-once delivery with reliable acks: a commit never
acknowledges a record its reader has not been handed, nor one leased to another reader.
Each mutant breaks one of those in the real code path — the broker's produce, the
client's buffered fetch, the broker's commit — and runs with ``fsync=always``, where no
allowance excuses a lost acknowledged put.
"""

from __future__ import annotations

from collections import deque

from lab.design import Delivery
from lab.backends.queuefka.core.broker import GROUP_SUFFIX, QueuefkaCore, is_segment
from lab.backends.queuefka.core.leases import Session
from lab.backends.queuefka.core.writer import Writer
from lab.backends.queuefka.driver import QueuefkaClient
from lab.design import Mutant, Patch

DURABLE = {"fsync": "always"}  # the promise of no loss under a crash: the options every mutant runs with


LINGER = 0.0015  # seconds the group commit's flusher waits for more records before its fsync


def _maybe_sync_left_to_the_flusher(self: Writer) -> None:
    """The writer's per-write fsync, with ``always`` left to the broker's group commit."""
    if self.policy.mode != "always":
        _MAYBE_SYNC(self)


async def _produce_with_group_commit(self: QueuefkaCore, name: str,
                                     payloads: tuple[bytes, ...] | list[bytes]) -> list[int]:
    """The produce with a group commit (one fsync for the records of ``LINGER`` seconds,
    not one per write), whose reply does not wait for that fsync: it runs in the background."""
    topic = self.topic(name)
    if topic.recovered:
        await topic.store.settle(lambda file: file.endswith(GROUP_SUFFIX))
        topic.recovered = False
    addresses = topic.writer.write_many(list(payloads)) if len(payloads) > 1 else [topic.writer.write(payloads[0])]
    topic.writer.flush()
    self.rt.spawn(_fsync_after_linger(self, topic), name="group commit")  # the bug: the reply goes first
    arrived, topic.arrived = topic.arrived, self.rt.event()
    arrived.set()
    return addresses


async def _fsync_after_linger(core: QueuefkaCore, topic) -> None:  # noqa: ANN001 (the broker's private _Topic)
    await core.rt.sleep(LINGER)
    topic.writer.sync()  # a no-op when an earlier flusher synced these records already
    await topic.store.settle(is_segment)


_MAYBE_SYNC = Writer._maybe_sync


async def _get_committing_the_whole_fetch(self: QueuefkaClient, queue: str, wait: float) -> Delivery | None:
    """The client's get, whose deliveries all carry the fetch's ``next`` as their token (the
    consumer's position, as a Kafka consumer's ``commitSync()`` with no argument commits
    it): the first ack commits every record of the fetch, those still in the buffer too."""
    buffered = self._buffered.get(queue)
    if not buffered:
        fetched = await self._fetch(queue, wait)
        if not fetched.records:
            return None
        token = (fetched.next, fetched.epoch)  # the bug: not the address after each record
        buffered = self._buffered[queue] = deque((payload, token) for _, payload in fetched.records)
    payload, token = buffered.popleft()
    return Delivery(queue, payload, token)


async def _commit_over_any_reader(self: QueuefkaCore, name: str, group: str, address: int,
                                  session: Session | None = None, epoch: int | None = None) -> int:
    """The broker's commit with the lease holder's check left out of its loop
    (``lease.end <= address and lease.holder is session`` without its second half): it
    acknowledges every fetch wholly before the address, whoever holds it — a cumulative
    commit, as a Kafka offset is — so a fetch whose reply was cut is acknowledged by the
    other reader's next commit, and never handed out again."""
    if epoch is not None and epoch == self.epoch:  # refusals stay the original's
        topic = self.topic(name, create=False)
        state = topic.groups.get(group)
        if state is not None and address <= state.consumer.position:
            mine = self._local if session is None else session
            for lease in state.leases:
                if lease.end <= address:  # the bug: another reader's lease, or one handed back, too
                    lease.holder = mine
    return await _COMMIT(self, name, group, address, session, epoch)


_COMMIT = QueuefkaCore.commit


async def _get_from_the_buffer_tail(self: QueuefkaClient, queue: str, wait: float) -> Delivery | None:
    """The client's get, taking each delivery from the wrong end of its fetch's buffer
    (``pop`` for ``popleft``): a fetch of several records is handed out last record first.
    Each token is still the address after its own record, so nothing is lost; the order
    is, whenever a fetch brings more than one record (a backlog)."""
    buffered = self._buffered.get(queue)
    if not buffered:
        fetched = await self._fetch(queue, wait)
        if not fetched.records:
            return None
        tokens = [(address, fetched.epoch) for address, _ in fetched.records[1:]] + [(fetched.next, fetched.epoch)]
        buffered = self._buffered[queue] = deque(zip((p for _, p in fetched.records), tokens))
    payload, token = buffered.pop()  # the bug: the newest record first
    return Delivery(queue, payload, token)


MUTANTS = [
    Mutant("queuefka-ack-before-fsync", "queuefka", "no loss of an acknowledged put under a crash",
           "a group commit: produce leaves the log's fsync to a flusher 1.5 ms later and replies without waiting for it",
           (Patch(QueuefkaCore, "produce", _produce_with_group_commit),
            Patch(Writer, "_maybe_sync", _maybe_sync_left_to_the_flusher)), options=DURABLE,
           scenarios=("ack-before-durable-crash", "crash-one", "crash-all")),
    Mutant("queuefka-commits-the-whole-fetch", "queuefka", "no loss of an acknowledged put (at-least-once)",
           "the client acks a delivery by committing its whole fetch, records still in its buffer too",
           (Patch(QueuefkaClient, "get", _get_committing_the_whole_fetch),), options=DURABLE,
           scenarios=("split-flapping", "split-clients")),
    Mutant("queuefka-commit-passes-other-leases", "queuefka", "no loss of an acknowledged put (at-least-once)",
           "a commit acknowledges every fetch before its address, those leased to other readers too",
           (Patch(QueuefkaCore, "commit", _commit_over_any_reader),), options=DURABLE,
           scenarios=("split-flapping", "split-majority")),
    Mutant("queuefka-serves-the-buffer-tail", "queuefka", "FIFO per consumer",
           "the client hands out its fetch's buffered records from the wrong end (pop for popleft), newest first",
           (Patch(QueuefkaClient, "get", _get_from_the_buffer_tail),), options=DURABLE,
           scenarios=("backlog-late-consumers", "ack-before-durable-crash", "crash-all")),
]
