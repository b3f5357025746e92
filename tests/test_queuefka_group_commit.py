"""Queuefka's offset commits under load (issue 34, item 4): commits that arrive while the
group file's fsync is in flight share the next one, none is acknowledged before an fsync
that covers it, and no commit waits for a compaction copy's fsync (nor does a busy group
retry a stale compaction at every commit)."""

from __future__ import annotations

import struct

from lab.backends.queuefka.core.batch import parse
from lab.backends.queuefka.core.broker_api import Config
from tests.queuefka_support import on_a_node

READERS = 8


def _durable_state(data) -> tuple[int, list[tuple[int, int]]]:
    """How far records were handed out, and the ranges not acknowledged, as the durable
    bytes of a group file say (what a crash now would leave)."""
    payload = parse(bytes(data.data[:data.durable]), 0, 1 << 62, 1 << 20).payloads[-1]
    numbers = [n for (n,) in struct.iter_unpack("<Q", payload)]
    return numbers[1], list(zip(numbers[2::2], numbers[3::2]))


def test_concurrent_commits_share_fsyncs_and_none_is_acknowledged_before_its_fsync():
    async def body(world, control, cores):
        core = cores[-1]
        await core.produce("t", [b"m%d" % i for i in range(READERS * 4)])
        sessions = [core.session() for _ in range(READERS)]
        fetched = [await core.fetch("t", "g", 4, session=s) for s in sessions]
        disk = world.nodes["q"].disk
        before = disk.fsyncs
        violations: list[str] = []

        async def commit(session, f):
            await core.commit("t", "g", f.next, session=session)
            handed, pending = _durable_state(disk.files["t/g.group"])
            start = f.records[0][0]
            if f.next > handed or any(s < f.next and start < e for s, e in pending):
                violations.append(f"{start}..{f.next} acknowledged, durable state {handed} {pending}")

        tasks = [control.spawn(commit(s, f)) for s, f in zip(sessions, fetched)]
        for task in tasks:
            await task
        assert violations == []
        # all eight came at once: the first starts an fsync, the other seven share the next one
        assert disk.fsyncs - before == 2
        assert core.stats("t")["groups"]["g"]["committed"] == fetched[-1].next

    on_a_node(body, Config())


def test_a_busy_group_neither_waits_for_compaction_nor_retries_it_at_every_commit():
    """Eight readers committing without a pause past the compaction threshold: each commit
    costs the group file's share of an fsync, not also a compaction copy's."""
    async def body(world, control, cores):
        core = cores[-1]
        await core.produce("t", [b"x" * 64] * 4000)
        disk = world.nodes["q"].disk
        before, commits = disk.fsyncs, 0

        async def reader():
            nonlocal commits
            session = core.session()
            while (f := await core.fetch("t", "g", 1, session=session)).records:
                await core.commit("t", "g", f.next, session=session)
                commits += 1

        tasks = [control.spawn(reader()) for _ in range(READERS)]
        for task in tasks:
            await task
        assert commits == 4000
        assert disk.files["t/g.group"].durable > 64 << 10  # past the threshold, so compaction was tried
        # deterministic (seed 1): 1,336 fsyncs; retrying the stale copy at every commit cost 1,546
        assert disk.fsyncs - before < 1400, disk.fsyncs - before

    on_a_node(body, Config())
