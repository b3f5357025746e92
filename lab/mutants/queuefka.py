"""Queuefka's mutants: the broker, its HTTP front and its client with one mistake each.

Queuefka with ``fsync=always`` promises that a crash loses no acknowledged put (the reply
waits for the log's fsync), at-least-once delivery with reliable acks (a commit never
acknowledges a record its reader has not been handed, nor one leased to another reader,
and an incarnation's leases die with it), and order per consumer with the default
prefetch. Each mutant breaks one of those in the real code path: the broker's produce, the
client's buffered fetch, the broker's commit.
"""

from __future__ import annotations

from lab.backends.queuefka.core.broker import GROUP_SUFFIX, QueuefkaCore, _is_segment
from lab.backends.queuefka.core.writer import Writer
from lab.mutants import Mutant, Patch

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
    await topic.store.settle(_is_segment)


_MAYBE_SYNC = Writer._maybe_sync

MUTANTS = [
    Mutant("queuefka-ack-before-fsync", "queuefka", "no loss of an acknowledged put under a crash",
           "a group commit: produce leaves the log's fsync to a flusher 1.5 ms later and replies without waiting for it",
           (Patch(QueuefkaCore, "produce", _produce_with_group_commit),
            Patch(Writer, "_maybe_sync", _maybe_sync_left_to_the_flusher)), options=DURABLE,
           scenarios=("ack-before-durable-crash", "crash-one", "crash-all")),
]
