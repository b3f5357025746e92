"""A group's commit records its in-flight state (issue 29, blind spot 5): besides the first
record not acknowledged, how far records were handed out and which below that are still
unacknowledged — so a restart hands out again exactly those, not every record past the
offset that a reader had acknowledged out of order. Plain commits (the embeddable
``Consumer``'s, older files) still read as the offset alone."""

from __future__ import annotations

from pathlib import Path

from lab.backends.queuefka.core.broker import QueuefkaCore
from lab.backends.queuefka.core.broker_api import Config
from lab.backends.queuefka.core.framing import frame
from lab.backends.queuefka.core.groups import CommittedOffset
from lab.worlds.live.disk import FileStore
from models.world import SimWorld


def test_the_state_round_trips_and_an_address_alone_still_reads(tmp_path: Path):
    store = FileStore(tmp_path / "t", create=True)
    offset = CommittedOffset(store, "g")
    offset.commit(13, 90, [(13, 26), (52, 90)])
    offset.close()
    again = CommittedOffset(store, "g")
    assert (again.address, again.handed, again.pending) == (13, 90, [(13, 26), (52, 90)])
    again.commit(26)  # an address alone (the embeddable Consumer's commit)
    again.close()
    plain = CommittedOffset(store, "g")
    assert (plain.address, plain.handed, plain.pending) == (26, None, [])
    with open(tmp_path / "t" / "g.group", "ab") as f:
        f.write(frame(bytes(24)))  # no commit has that length: not one of ours, ignored
    assert CommittedOffset(store, "g").address == 26


def test_compaction_keeps_the_whole_state(tmp_path: Path):
    store = FileStore(tmp_path / "t", create=True)
    offset = CommittedOffset(store, "g")
    for i in range(120):  # commits of 1.6 KB: compacted past 64 KiB
        offset.commit(i, i + 1000, [(i + 10 * k, i + 10 * k + 5) for k in range(100)])
    offset.close()
    assert (tmp_path / "t" / "g.group").stat().st_size < (64 << 10) + 1632  # compacted (120 commits: 191 KiB)
    last = CommittedOffset(store, "g")
    assert (last.address, last.handed) == (119, 1119)
    assert last.pending == [(119 + 10 * k, 124 + 10 * k) for k in range(100)]


def test_a_restart_hands_out_again_only_what_was_not_acknowledged():
    """Two readers: a acknowledges its fetch, b does not; the group's offset stays at b's
    records. After a restart, b's records come again and a's never do."""
    world = SimWorld(seed=1)
    cores: list[QueuefkaCore] = []

    async def boot(rt):
        cores.append(QueuefkaCore(rt, Config(fsync="always")))

    async def main(control):
        await world.start("q", boot)
        await cores[-1].produce("t", [b"m%d" % i for i in range(6)])
        a, b = cores[-1].session(), cores[-1].session()
        held = await cores[-1].fetch("t", "g", 2, session=b)
        done = await cores[-1].fetch("t", "g", 2, session=a)
        committed = await cores[-1].commit("t", "g", done.next, session=a, epoch=done.epoch)
        world.crash("q")
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        handed = []
        while records := (await cores[-1].fetch("t", "g", 10)).records:
            handed += records
        return held.records, committed, handed

    held, committed, handed = world.run(main)
    assert committed == held[0][0]  # b's records hold the offset back
    assert [p for _, p in handed] == [b"m0", b"m1", b"m4", b"m5"]  # m2, m3 were acknowledged
