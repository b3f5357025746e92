"""Queuefka's recovery cuts a group's whole commit back to the end the log recovered to —
not only its address, but how far it says records were handed out and which of them were
not acknowledged (lab swarm, seed 186 of queuefka with fsync=never and the per-seed load).

The finding: a reader's fetch lost by a fault held the group's committed offset C at its
records, while the others read on; the group's last commit said "handed out up to H, of
which [C, C') and a few ranges near H are not acknowledged". A crash lost the log's
unsynced tail, so the log recovered to an end E with C <= E < H: the address alone was
not past E, so nothing was cut back. After the restart the producer wrote new records at
E, E+1 record, ... — addresses the old incarnation had handed out — before any reader
fetched; the group's state, restored at the first fetch, took "handed out up to H" (cut
to the log's end *then*, past the new records) as true: the new records below it were
taken for handed out and acknowledged, except those that happened to fall in an old
unacknowledged range. Put after the restart, acknowledged to the producer, never delivered.
"""

from __future__ import annotations

from pathlib import Path

from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.core.groups import CommittedOffset, clamp_commits
from lab.worlds.live.disk import FileStore
from tests.queuefka_support import on_a_node


def test_records_written_after_a_crash_at_addresses_the_lost_tail_had_handed_out_are_delivered():
    """Reader a fetches m0 and never acknowledges it (its reply was lost); reader b
    fetches and acknowledges m1..m3: the group commits C=0, handed out up to m3's end,
    [m0] unacknowledged — durably; the log is not (fsync=never). The crash loses all
    four records; n0..n2 are put after the restart, at m0..m2's addresses, before any
    fetch. Every one of them is delivered (before the fix: n0 only, in m0's old range)."""

    async def body(world, control, cores):
        old = await cores[-1].produce("t", [b"m%d" % i for i in range(4)])
        a, b = cores[-1].session(), cores[-1].session()
        held = await cores[-1].fetch("t", "g", 1, session=a)
        done = await cores[-1].fetch("t", "g", 3, session=b)
        committed = await cores[-1].commit("t", "g", done.next, session=b, epoch=done.epoch)
        world.crash("q")
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        new = [a for i in range(3) for a in await cores[-1].produce("t", [b"n%d" % i])]
        handed = []
        while records := (await cores[-1].fetch("t", "g", 10)).records:
            handed += records
        return old, held.records, committed, new, handed

    old, held, committed, new, handed = on_a_node(body, Config(fsync="never"))
    assert [p for _, p in held] == [b"m0"] and committed == old[0]  # a's record holds the offset back
    assert new == old[:3]  # the lost tail's addresses, reused by the records put after the restart
    assert [p for _, p in handed] == [b"n0", b"n1", b"n2"]


def test_a_second_crash_after_the_restart_still_delivers_the_new_records_it_kept():
    """The cut-back state is durable before a record is written behind it: with the new
    records fsynced (fsync=always) a second crash keeps them, and the group hands them
    all out — not the stale "handed out up to H" of the commit before the first crash."""

    async def body(world, control, cores):
        await cores[-1].produce("t", [b"m%d" % i for i in range(4)])
        a, b = cores[-1].session(), cores[-1].session()
        await cores[-1].fetch("t", "g", 1, session=a)
        done = await cores[-1].fetch("t", "g", 3, session=b)
        await cores[-1].commit("t", "g", done.next, session=b, epoch=done.epoch)
        world.crash("q")
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        cores[-1].config = Config(fsync="always")  # from now on the log is durable
        for i in range(3):
            await cores[-1].produce("t", [b"n%d" % i])
        world.crash("q")
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        handed = []
        while records := (await cores[-1].fetch("t", "g", 10)).records:
            handed += records
        return handed

    assert [p for _, p in on_a_node(body, Config(fsync="never"))] == [b"n0", b"n1", b"n2"]


def test_clamp_commits_cuts_the_handed_out_mark_and_the_unacknowledged_ranges_to_the_end(tmp_path: Path):
    """On plain files: a commit at or below the recovered end with a handed-out mark past
    it is cut back too (mark at the end, ranges clipped), and reported; one wholly below
    the end is left alone; an address past the end is cut to the end, as before (the
    address alone)."""
    store = FileStore(tmp_path / "t", create=True)
    for group, state in {"behind": (10, 100, [(10, 20), (50, 60), (90, 100)]),
                         "inside": (10, 30, [(10, 20)]),
                         "past": (80, 100, [(90, 100)])}.items():
        offset = CommittedOffset(store, group)
        offset.commit(*state)
        offset.close()
    clamped = clamp_commits(store, 55)
    assert sorted(clamped) == ["behind", "past"]
    states = {}
    for group in ("behind", "inside", "past"):
        offset = CommittedOffset(store, group)
        states[group] = (offset.address, offset.handed, offset.pending)
        offset.close()
    assert states == {"behind": (10, 55, [(10, 20), (50, 55)]),
                      "inside": (10, 30, [(10, 20)]),
                      "past": (55, None, [])}  # the address alone: everything from it on unacknowledged
