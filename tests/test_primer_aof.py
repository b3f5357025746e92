"""Primer's append-only file: the record bytes, every kind's round trip, torn tails and corrupt
records, crashes in the sim world and on real files (the live disk's power cut), compaction
and a crash in the middle of one, and ``lab primer dump``."""

from __future__ import annotations

import argparse
import random
import struct
import zlib
from pathlib import Path

import pytest

from lab.backends.primer import tools
from lab.backends.primer.core.aof import AofFile, CorruptFile
from lab.backends.primer.core.aof_records import (HEADER, MAX_PAYLOAD, Ack, Append, Checkpoint, Commit, Corrupt,
                                                  HighWatermark, LogCreated, Put, Range, Torn, Trim, decode, encode)
from lab.backends.primer.dump import NotAnAof, dump
from lab.worlds.live.disk import FileStore, power_cut
from lab.worlds.live.world import LiveWorld
from lab.design.storage import RuntimeStore
from models.world import SimWorld

EVERY_KIND = [
    Put("m-1", "n1", 7, 1_700_000_000_000_000_000, ("n1", "n2"), b"hello"),
    Ack("m-1"),
    Commit("n1", 7),
    LogCreated(3600.0),
    Range(1000, ("n2", "n3", "n1")),
    Append(1000, 1_700_000_000_000_000_001, b"\x00\xffrecord"),
    HighWatermark(999),
    Checkpoint("billing", 998),
    Trim(500),
]
NAME = "queue.orders.aof"


def puts(n: int, start: int = 0) -> list[Put]:
    return [Put(f"m{i}", "n1", i, 1000 + i, ("n1", "n2"), b"payload %d" % i) for i in range(start, start + n)]


def frame(kind: int, meta: bytes, payload: bytes = b"", crc_delta: int = 0) -> bytes:
    """A record built by hand, to feed the decoder what the encoder never writes."""
    body = bytes([kind]) + struct.pack(">I", len(meta)) + meta + payload
    return struct.pack(">II", len(body), (zlib.crc32(body) + crc_delta) & 0xFFFFFFFF) + body


def fresh(tmp_path: Path, records=EVERY_KIND) -> tuple[FileStore, Path, list[int]]:
    """A file on disk holding ``records``, synced; the offset of each record."""
    store = FileStore(tmp_path, create=True)
    aof = AofFile(store, NAME)
    aof.recover()
    offsets = []
    for r in records:
        offsets.append(aof.size)
        aof.append(r)
    assert aof.sync() is None  # a FileStore's fsync blocks
    aof.close()
    return store, tmp_path / NAME, offsets


# -- the record format -----------------------------------------------------------------------

def test_record_bytes_are_length_crc_kind_meta_length_sorted_compact_json_and_payload():
    data = encode(Put("m", "n1", 3, 9, ("n1", "n2"), b"hi"))
    meta = b'{"id":"m","origin":"n1","put_ns":9,"replicas":["n1","n2"],"seq":3}'
    body = b"\x01" + struct.pack(">I", len(meta)) + meta + b"hi"
    assert data == struct.pack(">II", len(body), zlib.crc32(body)) + body
    assert encode(Ack("m")) == frame(2, b'{"id":"m"}')


@pytest.mark.parametrize("record", EVERY_KIND, ids=lambda r: type(r).__name__)
def test_every_kind_round_trips_at_any_offset(record):
    data = b"junk" + encode(record) + b"next"
    decoded, end = decode(data, 4)
    assert decoded == record and type(decoded.__dict__.get("replicas", ())) is tuple
    assert end == len(data) - 4


def test_every_proper_prefix_of_a_record_is_torn_never_corrupt():
    data = encode(EVERY_KIND[0])
    for cut in range(len(data)):
        with pytest.raises(Torn):
            decode(data[:cut], 0)


@pytest.mark.parametrize("data, why", [
    (frame(2, b'{"id":"m"}', crc_delta=1), "crc mismatch"),
    (frame(42, b'{"id":"m"}'), "unknown record kind 42"),
    (frame(2, b'{"id":'), "bad meta JSON"),
    (frame(2, b'\xff\xfe'), "bad meta JSON"),
    (frame(2, b'["m"]'), "Ack meta has list"),
    (frame(2, b'{"id":"m","x":1}'), "wants ['id']"),
    (frame(3, b'{"origin":"n1","seq":-1}'), "Commit.seq = -1"),
    (frame(3, b'{"origin":"n1","seq":true}'), "Commit.seq = True"),
    (frame(4, b'{"retention_s":NaN}'), "bad meta JSON"),
    (frame(5, b'{"replicas":["a",1],"start":0}'), "Range.replicas"),
    (frame(2, b'{"id":"m"}', payload=b"x"), "Ack carries 1 bytes of payload"),
    (struct.pack(">II", 1 << 30, 0) + b"\x02", "over the"),
    (struct.pack(">II", 2, zlib.crc32(b"\x02\x00")) + b"\x02\x00", "under the 5"),
])
def test_a_bad_record_is_corrupt_with_its_offset_and_reason(data: bytes, why: str):
    with pytest.raises(Corrupt) as e:
        decode(b"12345" + data, 5)
    assert e.value.offset == 5 and why in e.value.why


def test_a_meta_length_past_the_record_is_corrupt():
    body = b"\x02" + struct.pack(">I", 100) + b'{"id":"m"}'
    with pytest.raises(Corrupt, match="meta length 100 runs past"):
        decode(struct.pack(">II", len(body), zlib.crc32(body)) + body, 0)


def test_encode_refuses_what_could_not_be_decoded():
    with pytest.raises(ValueError, match="Commit.seq"):
        encode(Commit("n1", -1))
    with pytest.raises(ValueError, match="LogCreated.retention_s"):
        encode(LogCreated(float("inf")))
    with pytest.raises(ValueError, match="over the"):
        encode(Append(0, 0, bytes(MAX_PAYLOAD + 1)))
    with pytest.raises(ValueError, match="not a Primer AOF record"):
        encode("Put")  # type: ignore[arg-type]


# -- the file on plain files -----------------------------------------------------------------

def test_a_new_file_is_its_header_and_recovers_every_kind_in_order(tmp_path: Path):
    store = FileStore(tmp_path, create=True)
    aof = AofFile(store, NAME)
    assert (tmp_path / NAME).read_bytes() == HEADER and aof.recover() == []
    for r in EVERY_KIND:
        aof.append(r)
    aof.sync()
    assert aof.records_written == len(EVERY_KIND)
    assert (tmp_path / NAME).read_bytes() == HEADER + b"".join(encode(r) for r in EVERY_KIND)
    again = AofFile(store, NAME)
    assert again.recover() == EVERY_KIND and again.torn_bytes == 0


def test_a_file_that_existed_must_be_recovered_before_it_is_appended_to(tmp_path: Path):
    store, path, _ = fresh(tmp_path)
    aof = AofFile(store, NAME)
    with pytest.raises(RuntimeError, match="recover"):
        aof.append(Ack("x"))
    assert path.read_bytes().endswith(encode(EVERY_KIND[-1]))


def test_a_torn_last_record_is_cut_at_every_length_and_appends_go_on(tmp_path: Path):
    store, path, _ = fresh(tmp_path)
    whole = path.read_bytes()
    last = encode(Put("torn", "n1", 99, 1, ("n1",), b"x" * 50))
    for cut in range(1, len(last)):
        path.write_bytes(whole + last[:cut])
        aof = AofFile(store, NAME)
        assert aof.recover() == EVERY_KIND
        assert aof.torn_bytes == cut and path.read_bytes() == whole
        aof.append(Ack("after"))
        aof.sync()
        assert AofFile(store, NAME).recover() == EVERY_KIND + [Ack("after")]
        path.write_bytes(whole)


def test_a_bad_crc_on_the_last_record_is_a_torn_tail(tmp_path: Path):
    store, path, offsets = fresh(tmp_path)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last byte of Trim's JSON
    path.write_bytes(bytes(data))
    aof = AofFile(store, NAME)
    assert aof.recover() == EVERY_KIND[:-1]
    assert aof.torn_bytes == len(data) - offsets[-1] and path.stat().st_size == offsets[-1]


def test_a_zero_filled_tail_is_a_torn_tail(tmp_path: Path):
    store, path, _ = fresh(tmp_path)
    whole = path.read_bytes()
    path.write_bytes(whole + bytes(4096))
    aof = AofFile(store, NAME)
    assert aof.recover() == EVERY_KIND and aof.torn_bytes == 4096 and path.read_bytes() == whole


@pytest.mark.parametrize("damage", ["crc", "kind", "length"])
def test_a_corrupt_record_before_the_end_names_its_byte_and_changes_nothing(tmp_path: Path, damage: str):
    store, path, offsets = fresh(tmp_path)
    data = bytearray(path.read_bytes())
    at = offsets[3]  # LogCreated, with records after it
    if damage == "crc":
        data[at + 4] ^= 0x01
        why = "crc mismatch"
    elif damage == "kind":
        body = b"\x63" + bytes(data[at + 9:offsets[4]])
        data[at + 4:at + 8] = struct.pack(">I", zlib.crc32(body))
        data[at + 8] = 0x63
        why = "unknown record kind 99"
    else:  # a length running past the end: not a torn tail, records whole follow it
        data[at:at + 4] = struct.pack(">I", len(data))
        why = "runs past the end of the file"
    path.write_bytes(bytes(data))
    before = path.read_bytes()
    with pytest.raises(CorruptFile) as e:
        AofFile(store, NAME).recover()
    assert str(e.value).startswith(f"{tmp_path}/{NAME}: byte {at}: ") and why in str(e.value)
    assert "\n" not in str(e.value)
    assert path.read_bytes() == before


def test_a_file_without_the_header_is_corrupt_and_a_torn_header_is_written_again(tmp_path: Path):
    store = FileStore(tmp_path, create=True)
    (tmp_path / NAME).write_bytes(b"SOMETHING ELSE ENTIRELY")
    with pytest.raises(CorruptFile, match=rf"{NAME}: byte 0: no PRIMAOF1 header"):
        AofFile(store, NAME).recover()
    assert (tmp_path / NAME).read_bytes() == b"SOMETHING ELSE ENTIRELY"
    (tmp_path / NAME).write_bytes(HEADER[:5])  # a crash while the file was created
    aof = AofFile(store, NAME)
    assert aof.recover() == [] and aof.torn_bytes == 5
    aof.append(Ack("a"))
    aof.sync()
    assert AofFile(store, NAME).recover() == [Ack("a")]


def test_compaction_keeps_exactly_the_live_records_and_appends_go_on(tmp_path: Path):
    store, path, _ = fresh(tmp_path, puts(20))
    aof = AofFile(store, NAME)
    records = aof.recover()
    live = [r for r in records if r.seq % 5 == 0] + [Commit("n1", 19)]
    before = aof.size
    assert aof.compact(live) is None  # done on return: a FileStore's fsync blocks
    assert aof.size < before and path.read_bytes() == HEADER + b"".join(encode(r) for r in live)
    assert not (tmp_path / f"{NAME}.compact").exists()
    aof.append(Ack("m0"))
    aof.sync()
    assert AofFile(store, NAME).recover() == live + [Ack("m0")]


def test_a_compaction_a_crash_interrupted_leaves_the_old_file_whole(tmp_path: Path):
    store, path, _ = fresh(tmp_path, puts(5))
    before = path.read_bytes()
    # the crash came before the rename: a half-written compact file beside the intact old one
    (tmp_path / f"{NAME}.compact").write_bytes(HEADER + encode(puts(1)[0])[:7])
    aof = AofFile(store, NAME)
    assert aof.recover() == puts(5) and path.read_bytes() == before
    assert not (tmp_path / f"{NAME}.compact").exists()


# -- crashes in the sim world ----------------------------------------------------------------

def sim_node(world: SimWorld, name: str = "n1"):
    """Start node ``name`` (booting nothing); returns a function giving its current Runtime."""
    runtimes = []

    async def boot(rt):
        runtimes.append(rt)

    async def start():
        await world.start(name, boot)

    return start, lambda: runtimes[-1]


def test_sim_a_crash_loses_only_what_was_not_synced():
    world = SimWorld(seed=1)
    start, rt = sim_node(world)

    async def main(control):
        await start()
        aof = AofFile(RuntimeStore(rt(), "primer"), NAME)
        aof.recover()
        for r in puts(10):
            aof.append(r)
        await aof.sync()
        for r in puts(5, start=10):
            aof.append(r)  # never synced
        world.crash("n1")
        world.restart("n1")
        await control.sleep(0.001)
        again = AofFile(RuntimeStore(rt(), "primer"), NAME)
        return again.recover(), again.torn_bytes

    recovered, torn = world.run(main)
    assert recovered == puts(10) and torn == 0


def test_sim_a_torn_crash_keeps_every_synced_record_and_cuts_the_rest_cleanly():
    tails = []
    for seed in range(12):
        world = SimWorld(seed=seed)
        start, rt = sim_node(world)

        async def main(control):
            await start()  # noqa: B023 (run within this iteration)
            aof = AofFile(RuntimeStore(rt(), "primer"), NAME)  # noqa: B023 (run within this iteration)
            aof.recover()
            for r in puts(8):
                aof.append(r)
            await aof.sync()
            for r in puts(8, start=8):
                aof.append(r)
            world.crash("n1", tear=True)  # noqa: B023 (run within this iteration)
            world.restart("n1")  # noqa: B023 (run within this iteration)
            await control.sleep(0.001)
            store = RuntimeStore(rt(), "primer")  # noqa: B023 (run within this iteration)
            again = AofFile(store, NAME)
            recovered = again.recover()
            size_after_recovery = again.size
            again.append(Ack("m0"))
            await again.sync()
            return recovered, again.torn_bytes, size_after_recovery, AofFile(store, NAME).recover()

        recovered, torn, size, after = world.run(main)
        assert recovered == puts(len(recovered)) and len(recovered) >= 8  # a prefix holding every synced one
        assert size == len(HEADER) + sum(len(encode(r)) for r in recovered)
        assert after == recovered + [Ack("m0")]
        tails.append(torn)
    assert sum(1 for torn in tails if torn) >= 6  # the tears did cut records in two


def test_sim_a_file_whose_header_was_never_synced_starts_over():
    world = SimWorld(seed=2)
    start, rt = sim_node(world)

    async def main(control):
        await start()
        AofFile(RuntimeStore(rt(), "primer"), NAME).append(Ack("lost"))  # new: no recovery needed
        world.crash("n1")
        world.restart("n1")
        await control.sleep(0.001)
        again = AofFile(RuntimeStore(rt(), "primer"), NAME)
        return again.recover(), again.size

    assert world.run(main) == ([], len(HEADER))


@pytest.mark.parametrize("crash_at", ["before the rename", "after the rename"])
def test_sim_a_crash_during_compaction_loses_no_synced_record(crash_at: str):
    world = SimWorld(seed=5)
    start, rt = sim_node(world)
    live = puts(3, start=2)

    async def main(control):
        await start()
        store = RuntimeStore(rt(), "primer")
        aof = AofFile(store, NAME)
        aof.recover()
        for r in puts(10):
            aof.append(r)
        await aof.sync()
        compaction = rt().spawn(aof.compact(live), name="compact")
        aof.append(Ack("m2"))  # written while the compaction's fsync runs: into both files
        if crash_at == "before the rename":
            await control.sleep(0)
            assert not compaction.done() and sorted(store.names()) == [NAME, f"{NAME}.compact"]
            for name in (NAME, f"{NAME}.compact"):  # the record is in both, whichever survives
                handle = store.open(name)
                assert handle.read(0, handle.size()).endswith(encode(Ack("m2")))
        else:
            await aof.sync()  # syncs both files: one disk queue, so the compaction's fsync came first
            await compaction
            assert store.names() == [NAME]
        world.crash("n1")
        world.restart("n1")
        await control.sleep(0.001)
        store = RuntimeStore(rt(), "primer")
        recovered = AofFile(store, NAME).recover()
        return recovered, store.names()

    recovered, names = world.run(main)
    # before the rename the old file is whole (the Ack was never synced); after it, the new
    # file holds exactly the live records and what was appended meanwhile
    assert recovered == (puts(10) if crash_at == "before the rename" else live + [Ack("m2")])
    assert names == [NAME]  # recovery threw an unfinished compact file away


# -- crashes on real files: the live disk's power cut ----------------------------------------

@pytest.mark.parametrize("tear", [False, True])
def test_live_a_power_cut_loses_only_what_was_not_synced(tmp_path: Path, tear: bool):
    async def write(rt):
        aof = AofFile(RuntimeStore(rt, "primer"), NAME)
        aof.recover()
        for r in puts(6):
            aof.append(r)
        await aof.sync()
        for r in puts(6, start=6):
            aof.append(r)

    LiveWorld(root=tmp_path).run(write)
    # the live world's main runs on the node "control": its disk is root/control
    path = tmp_path / "control" / "primer" / NAME
    assert len(path.read_bytes()) == len(HEADER) + sum(len(encode(r)) for r in puts(12))  # all in the page cache
    cut = power_cut(tmp_path / "control", random.Random(7), tear=tear)
    assert cut > 0

    async def read(rt):
        aof = AofFile(RuntimeStore(rt, "primer"), NAME)
        return aof.recover(), aof.torn_bytes

    recovered, torn = LiveWorld(root=tmp_path).run(read)
    if tear:
        assert recovered == puts(len(recovered)) and 6 <= len(recovered) <= 12
    else:
        assert recovered == puts(6) and torn == 0


# -- lab primer dump -------------------------------------------------------------------------

def test_dump_prints_one_line_per_record_with_offsets_and_payload_previews(tmp_path: Path):
    long = Append(1, 2, bytes(range(100)))
    _, path, offsets = fresh(tmp_path, EVERY_KIND + [long])
    lines = list(dump(path))
    assert lines[0] == f"{offsets[0]} Put id=m-1 origin=n1 seq=7 put_ns=1700000000000000000 replicas=n1,n2 payload=5 bytes b'hello'"
    assert lines[1] == f"{offsets[1]} Ack id=m-1"
    assert lines[3] == f"{offsets[3]} LogCreated retention_s=3600.0"
    assert lines[4] == f"{offsets[4]} Range start=1000 replicas=n2,n3,n1"
    assert lines[5] == f"{offsets[5]} Append offset=1000 put_ns=1700000000000000001 payload=8 bytes b'\\x00\\xffrecord'"
    assert lines[7] == f"{offsets[7]} Checkpoint group=billing offset=998"
    assert lines[9] == f"{offsets[9]} Append offset=1 put_ns=2 payload=100 bytes {bytes(range(40))!r}..."
    assert len(lines) == 10


def test_dump_reports_a_torn_tail_and_ends_at_a_corrupt_record(tmp_path: Path):
    _, path, offsets = fresh(tmp_path, puts(3))
    whole = path.read_bytes()
    path.write_bytes(whole + encode(Ack("x"))[:6])
    lines = dump(path)
    assert list(lines)[-1] == f"{len(whole)} torn tail: 6 bytes" and lines.corrupt is None
    assert path.read_bytes() == whole + encode(Ack("x"))[:6]  # a dump never repairs
    data = bytearray(whole)
    data[offsets[1] + 8] = 77
    path.write_bytes(bytes(data))
    lines = dump(path)
    out = list(lines)
    assert out[0].startswith(f"{offsets[0]} Put id=m0 ")
    assert out[1] == f"{offsets[1]} corrupt: crc mismatch" + out[1].split("crc mismatch")[1] and len(out) == 2
    assert lines.corrupt.startswith(f"{path}: byte {offsets[1]}: crc mismatch")


def test_dump_of_a_missing_file_or_one_without_the_header_is_a_one_line_value_error(tmp_path: Path):
    with pytest.raises(NotAnAof, match="cannot read it"):
        dump(tmp_path / "nope.aof")
    (tmp_path / "x.aof").write_bytes(b"{}\n")
    with pytest.raises(ValueError, match=r"x.aof: not a Primer append-only file \(no PRIMAOF1 header\)$"):
        dump(tmp_path / "x.aof")
    (tmp_path / "new.aof").write_bytes(b"")
    assert list(dump(tmp_path / "new.aof")) == []


def run_tool(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    tools.add_arguments(parser)
    return tools.run(parser.parse_args(list(argv)))


def test_the_dump_tool_exits_1_after_a_corrupt_record_and_0_otherwise(tmp_path: Path, capsys):
    _, good, _ = fresh(tmp_path / "a", puts(2))
    _, bad, offsets = fresh(tmp_path / "b", puts(3))
    data = bytearray(bad.read_bytes())
    data[offsets[1] + 4] ^= 1
    bad.write_bytes(bytes(data))
    assert run_tool("dump", str(good)) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith(f"{offsets[1]} Put id=m1 ")
    assert run_tool("dump", str(good), str(bad)) == 1
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0] == f"# {good}" and out[3] == f"# {bad}" and out[-1].startswith(f"{offsets[1]} corrupt: crc mismatch")
    assert captured.err.strip().startswith(f"lab: error: {bad}: byte {offsets[1]}: crc mismatch")
    assert len(captured.err.strip().splitlines()) == 1
    with pytest.raises(ValueError, match="cannot read it"):
        run_tool("dump", str(tmp_path / "missing.aof"))
