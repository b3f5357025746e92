"""The live world's crash loses what was not fsynced, as the sim world's does: the disk's
ledger of fsyncs, truncates, renames and removes, and the power cut that replays it."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from lab.worlds.live import LiveWorld
from lab.worlds.live.disk import LiveDisk, durable_sizes, power_cut


def test_a_power_cut_keeps_what_was_fsynced_and_follows_renames_truncates_and_removes(tmp_path: Path):
    root = tmp_path / "node"
    root.mkdir()
    (root / "old").write_bytes(b"x" * 10)  # there before the node started: durable

    async def main(_):
        disk = LiveDisk(root)
        a = disk.open("a")
        a.append(b"1234")
        await a.fsync()
        a.append(b"5678")  # never fsynced
        b = disk.open("dir/b")
        b.append(b"abcdef")
        await b.fsync()
        b.truncate(3)  # durable shrinks with it
        b.append(b"XYZ")
        disk.rename("dir/b", "dir/c")
        gone = disk.open("gone")
        gone.append(b"zz")
        await gone.fsync()
        disk.remove("gone")
        never = disk.open("never")
        never.append(b"lost")
        for f in (a, b, never):
            f.close()

    LiveWorld(root=tmp_path / "w").run(main)
    assert durable_sizes(root) == {"old": 10, "a": 4, "dir/c": 3}
    cut = power_cut(root, random.Random(1))
    assert cut == 4 + 3 + 4
    assert {p.name: p.read_bytes() for p in root.rglob("*") if p.is_file()} == {
        "old": b"x" * 10, "a": b"1234", "c": b"abc", "never": b""}


def test_a_torn_power_cut_keeps_a_seeded_prefix_of_each_unsynced_tail(tmp_path: Path):
    sizes = []
    for attempt in range(2):
        root = tmp_path / f"node{attempt}"

        async def main(_):
            f = LiveDisk(root).open("log")  # noqa: B023 (run within this iteration)
            f.append(b"s" * 100)
            await f.fsync()
            f.append(b"u" * 1000)
            f.close()

        LiveWorld(root=tmp_path / f"w{attempt}").run(main)
        power_cut(root, random.Random("seed"), tear=True)
        sizes.append((root / "log").stat().st_size)
    assert sizes[0] == sizes[1] and 100 <= sizes[0] <= 1100
    assert sizes[0] not in (100, 1100)  # this seed keeps part of the tail, not none or all


def test_a_fresh_node_that_never_writes_leaves_no_ledger(tmp_path: Path):
    async def main(_):
        LiveDisk(tmp_path / "client")

    LiveWorld(root=tmp_path / "w").run(main)
    assert not (tmp_path / "client.durable").exists()


def test_a_handle_follows_its_file_through_a_rename_and_a_replaced_file_counts_for_nothing(tmp_path: Path):
    # Queuefka compacts a group's commits so: a copy written and fsynced, renamed over the
    # offsets file, then appended to and fsynced through the same handle. The ledger once
    # kept the copy's old name for those fsyncs, and a power cut cut every later commit.
    root = tmp_path / "node"
    root.mkdir()

    async def main(_):
        disk = LiveDisk(root)
        offsets = disk.open("g.offsets")
        offsets.append(b"old-commits")
        syncing = asyncio.ensure_future(offsets.fsync())  # under way while its file is replaced
        copy = disk.open("g.tmp")
        copy.append(b"c1")
        await copy.fsync()
        disk.rename("g.tmp", "g.offsets")
        copy.append(b"c2")
        await copy.fsync()  # durable under the file's new name
        copy.append(b"c3")  # never fsynced
        await syncing  # the replaced file's fsync ends after the rename: it counts for nothing
        fresh = disk.open("g.tmp")  # a new file under the copy's old name
        fresh.append(b"unsynced")
        for f in (offsets, copy, fresh):
            f.close()

    LiveWorld(root=tmp_path / "w").run(main)
    assert durable_sizes(root) == {"g.offsets": 4}
    power_cut(root, random.Random(1))
    assert {p.name: p.read_bytes() for p in root.rglob("*") if p.is_file()} == {"g.offsets": b"c1c2", "g.tmp": b""}
