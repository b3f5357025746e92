"""Kestrel's syncJournal=always in the sim world: writers to one queue share fsyncs (group
commit), no put is acknowledged before the fsync that covers its record, and the files a
settle waits for are exactly the journal files of the queues a put reaches."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lab.backends.kestrel.config import config_from_mapping
from lab.backends.kestrel.core.collection import QueueCollection
from lab.backends.kestrel.core.journal import queue_of_file
from lab.design.storage import RuntimeStore
from models.world import SimWorld

WRITERS = 20


def _run_writers(queues: list[str]) -> tuple[int, list[tuple[int, int]], int]:
    """``WRITERS`` concurrent puts, writer i to ``queues[i % len(queues)]``, each acknowledged
    as the server does (add, then settle its queue). Returns the disk's fsyncs, and for each
    put (the end of its record in its file, that file's durable bytes when it was acknowledged),
    and how many puts a crash right after the last acknowledgement keeps."""
    world = SimWorld(seed=3)
    config = config_from_mapping({"default": {"syncJournal": "always"}})
    made: list[QueueCollection] = []

    async def boot(rt):
        made.append(QueueCollection(rt, config, RuntimeStore(rt, "queues")))

    async def main(control):
        await world.start("k", boot)
        c = made[-1]
        disk = world.nodes["k"].disk
        for q in set(queues):
            c.queue(q)  # created (and its file opened) before the writers start
        before = disk.fsyncs
        acks: list[tuple[int, int]] = []

        async def writer(i: int) -> None:
            q = queues[i % len(queues)]
            await control.sleep(i * 1e-5)  # they arrive while the first fsync is in flight
            c.add(q, b"item-%d" % i)
            end = c.queues[q].journal.size  # the put's record ends here
            await c.settle(q)
            acks.append((end, disk.files[f"queues/{q}"].durable))

        tasks = [control.spawn(writer(i)) for i in range(WRITERS)]
        for task in tasks:
            await task
        fsyncs = disk.fsyncs - before
        world.crash("k")
        await control.sleep(0.01)
        world.restart("k")
        await control.sleep(0.01)
        kept = sum(made[-1].queue(q).length for q in set(queues))
        return fsyncs, acks, kept

    return world.run(main)


def test_writers_to_one_queue_share_fsyncs_and_each_ack_follows_its_fsync():
    fsyncs, acks, kept = _run_writers(["q"])
    assert len(acks) == WRITERS
    # one fsync in flight when the others arrive, one next one for all of them (a third at most)
    assert fsyncs <= 3 < WRITERS
    assert all(durable >= end for end, durable in acks), acks  # nothing acknowledged before its fsync
    assert kept == WRITERS


def test_writers_to_their_own_queues_each_wait_for_their_own_file():
    queues = [f"q{i}" for i in range(WRITERS)]
    fsyncs, acks, kept = _run_writers(queues)
    assert fsyncs == WRITERS  # one file each: nothing to share, one fsync each
    assert all(durable >= end for end, durable in acks), acks
    assert kept == WRITERS


_names = st.text(alphabet="abz019_-+!", min_size=1, max_size=6)


@given(queues=st.sets(_names, min_size=1, max_size=4), other=_names,
       suffix=st.sampled_from(["", ".1700000000000", ".1700000000000.pack", "~~1700000000000"]))
def test_the_settle_file_test_is_queue_of_file(queues: set[str], other: str, suffix: str):
    collection = QueueCollection.__new__(QueueCollection)
    collection._matchers = {}
    match = collection._files_of(queues)
    for name in (other + suffix, *(q + suffix for q in queues)):
        assert bool(match(name)) == (queue_of_file(name) in queues), name
