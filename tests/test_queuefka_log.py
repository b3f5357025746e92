"""Queuefka's log library: the spec's vectors, the original's files, and every bug fix."""

from __future__ import annotations

import hashlib
import logging
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from lab.backends.queuefka import AddressError, CorruptRecord, FsyncPolicy, Reader, Writer
from lab.backends.queuefka.core.batch import frame_many, xxh32_rows
from lab.backends.queuefka.core.framing import checksum, frame, segment_name

DATA = Path(__file__).parent / "data"


def segments(topic: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_size) for p in topic.glob("*.slab"))


def gold_payload(i: int) -> bytes:
    return bytes((i * 7 + j * 13) % 256 for j in range((i * 37) % 1500 + 1))


# -- the spec's vectors ------------------------------------------------------------------

VECTORS = [
    (b"", "00000000055dcc02", "638b63841e6c2cd27f1921162c6177c6196882ea84dec9969609b53d993e994e"),
    (b"hello", "05000000f97700fb68656c6c6f", "0d02d4b5a233ce7db2d247fe24a24a67dbc785d0b2b78c822599720953c99086"),
    (b"a" * 1000, "e8030000862be837" + "61" * 1000, "17a593fe1db963e0eb647ace67f405d7fa2d8d83a09edcc4b3377b60d1ffeef6"),
    (b"This is only a test.", "14000000e17f218e5468697320697320" + "6f6e6c79206120746573742e", None),
]


@pytest.mark.parametrize("payload,hexbytes,sha", VECTORS)
def test_vectors_byte_for_byte(tmp_path: Path, payload: bytes, hexbytes: str, sha: str | None):
    with Writer(tmp_path / "t", 1 << 20) as w:
        assert w.write(payload) == 0
    data = (tmp_path / "t" / "00000000000000000000.slab").read_bytes()
    assert data.hex() == hexbytes
    if sha:
        assert hashlib.sha256(data).hexdigest() == sha
    assert frame(payload) == data
    assert list(Reader(tmp_path / "t")) == [(0, payload)]


def test_batched_framing_equals_single(tmp_path: Path):
    payloads = [b"This is only a test."] * 100 + [b"", b"x"] + [bytes([i]) * i for i in range(60)]
    data, sizes = frame_many(payloads)
    assert data == b"".join(map(frame, payloads))
    assert list(sizes) == [8 + len(p) for p in payloads]


@pytest.mark.parametrize("n", [0, 1, 3, 4, 5, 15, 16, 17, 20, 31, 32, 33, 64, 100, 1000])
def test_vectorised_xxh32_equals_xxhash(n: int):
    import numpy as np

    rows = np.random.default_rng(n).integers(0, 256, (40, n), dtype=np.uint8)
    assert [int(h) for h in xxh32_rows(rows)] == [checksum(r.tobytes()) for r in rows]


# -- rotation and the original's files ------------------------------------------------------

def test_rotation_vector_matches_the_original(tmp_path: Path):
    topic = tmp_path / "rot"
    with Writer(topic, 64) as w:
        addresses = [w.write(f"msg-{i:02d}-xxxxxxxxxxx".encode()) for i in range(7)]
    assert addresses == [0, 26, 52, 78, 104, 130, 156]
    assert segments(topic) == [(segment_name(0), 78), (segment_name(78), 78), (segment_name(156), 26)]
    for name, _ in segments(topic):  # the original Go writer's files, byte for byte
        assert (topic / name).read_bytes() == (DATA / "queuefka-rot64" / name).read_bytes()
    with Writer(topic, 64) as w:  # reopening appends to the highest segment
        assert w.write(b"twelve bytes") == 182
    assert segments(topic)[-1] == (segment_name(156), 46)


def test_batched_writes_rotate_exactly_as_single_writes(tmp_path: Path):
    payloads = [f"msg-{i:02d}-xxxxxxxxxxx".encode() for i in range(40)]
    with Writer(tmp_path / "one", 64) as w:
        singles = [w.write(p) for p in payloads]
    with Writer(tmp_path / "many", 64) as w:
        batched = w.write_many(payloads[:5]) + w.write_many(payloads[5:])
    assert singles == batched
    assert segments(tmp_path / "one") == segments(tmp_path / "many")
    for name, _ in segments(tmp_path / "one"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()


def test_rotation_is_eager_strict_and_hint_zero_is_one_record_per_segment(tmp_path: Path):
    with Writer(tmp_path / "eager", 20) as w:
        w.write(b"x" * 18)  # a 26-byte record crosses the hint: next segment now, empty
    assert segments(tmp_path / "eager") == [(segment_name(0), 26), (segment_name(26), 0)]
    with Writer(tmp_path / "exact", 26) as w:
        w.write(b"x" * 18)  # exactly the hint: no rotation
    assert segments(tmp_path / "exact") == [(segment_name(0), 26)]
    with Writer(tmp_path / "zero", 0) as w:
        w.write_many([b"a", b"bb", b"ccc"])
    assert segments(tmp_path / "zero") == [(segment_name(0), 9), (segment_name(9), 10), (segment_name(19), 11),
                                           (segment_name(30), 0)]


def test_reads_the_original_gold_log(tmp_path: Path):
    reader = Reader(DATA / "queuefka-gold")
    records = list(reader)
    assert [p for _, p in records] == [gold_payload(i) for i in range(300)]
    assert reader.read() is None
    single = Reader(DATA / "queuefka-gold")
    assert [single.read() for _ in range(300)] == records
    assert single.read() is None


def test_appends_to_a_log_written_by_the_original(tmp_path: Path):
    topic = tmp_path / "gold"
    shutil.copytree(DATA / "queuefka-gold", topic)
    end = sum(size for _, size in segments(topic))
    with Writer(topic, 4096) as w:
        assert w.write(b"ours") == end
    assert [p for _, p in Reader(topic)][-2:] == [gold_payload(299), b"ours"]


# -- the original's bugs, fixed -----------------------------------------------------------

def test_empty_payloads_are_records(tmp_path: Path):
    with Writer(tmp_path / "t", 1 << 20) as w:
        assert w.write_many([b"", b"", b"x", b""]) == [0, 8, 16, 25]
    assert list(Reader(tmp_path / "t")) == [(0, b""), (8, b""), (16, b"x"), (25, b"")]


def test_reader_starts_at_any_record_address(tmp_path: Path):
    with Writer(tmp_path / "t", 64) as w:
        addresses = w.write_many([f"m{i}".encode() * (i + 1) for i in range(30)])
    for i in (1, 2, 7, 13, 29):
        reader = Reader(tmp_path / "t", addresses[i])
        assert [a for a, _ in reader] == addresses[i:]
        reader.seek(addresses[3])
        assert reader.read() == (addresses[3], b"m3" * 4)


def test_no_redelivery_after_reaching_the_end(tmp_path: Path):
    w = Writer(tmp_path / "t", 1 << 20)
    reader = Reader(tmp_path / "t")
    w.write(b"one")
    w.flush()
    assert reader.read() == (0, b"one")
    assert reader.read() is None
    w.write(b"two")
    w.flush()
    assert reader.read() == (11, b"two")  # the original returned "one" again here
    assert reader.read() is None
    w.close()


def test_a_record_cut_short_at_the_end_is_not_complete_yet(tmp_path: Path):
    topic = tmp_path / "t"
    with Writer(topic, 1 << 20) as w:
        w.write(b"first")
    record = frame(b"second record")
    slab = topic / segment_name(0)
    reader = Reader(topic)
    assert reader.read() == (0, b"first")
    cut_prev = 0
    for cut in (1, 4, 8, 12):  # a torn header, then a torn payload
        with open(slab, "ab") as f:
            f.write(record[cut_prev:cut])
        cut_prev = cut
        assert reader.read() is None and reader.read_many() == []
        assert reader.address == 13
    with open(slab, "ab") as f:
        f.write(record[cut_prev:])
    assert reader.read() == (13, b"second record")


def test_checksum_mismatch_raises_with_the_address_and_never_returns_data(tmp_path: Path):
    topic = tmp_path / "t"
    with Writer(topic, 1 << 20) as w:
        addresses = w.write_many([b"good-%03d" % i for i in range(50)])
    slab = topic / segment_name(0)
    data = bytearray(slab.read_bytes())
    data[addresses[20] + 10] ^= 0xFF  # a payload byte of record 20
    slab.write_bytes(bytes(data))
    reader = Reader(topic)
    first = reader.read_many(100)
    assert [p for _, p in first] == [b"good-%03d" % i for i in range(20)]
    with pytest.raises(CorruptRecord) as error:
        reader.read_many(100)
    assert error.value.address == addresses[20] and error.value.next_address == addresses[21]
    with pytest.raises(CorruptRecord):  # still there: the reader does not skip on its own
        reader.read()
    reader.seek(error.value.next_address)
    assert reader.read() == (addresses[21], b"good-021")


def test_impossible_length_raises(tmp_path: Path):
    topic = tmp_path / "t"
    topic.mkdir()
    (topic / segment_name(0)).write_bytes(frame(b"ok") + b"\xff\xff\xff\x7f" + b"\0" * 40)
    reader = Reader(topic, max_record=1 << 20)
    assert reader.read() == (0, b"ok")
    with pytest.raises(CorruptRecord, match="impossible length"):
        reader.read()


def test_gap_and_cut_record_in_a_sealed_segment_raise(tmp_path: Path):
    topic = tmp_path / "t"
    with Writer(topic, 20) as w:
        w.write_many([b"x" * 20] * 6)  # 28-byte records: one per segment
    names = [n for n, _ in segments(topic)]
    os.remove(topic / names[2])
    reader = Reader(topic)
    assert [a for a, _ in reader.read_many()] == [0, 28]
    with pytest.raises(CorruptRecord, match="bytes lost") as error:
        reader.read_many()
    reader.seek(error.value.next_address)
    assert [a for a, _ in reader] == [84, 112, 140]
    with open(topic / names[0], "r+b") as f:
        f.truncate(20)
    with pytest.raises(CorruptRecord, match="cut short"):
        list(Reader(topic))


def test_address_errors(tmp_path: Path):
    topic = tmp_path / "t"
    assert Reader(topic).read() is None  # no segment yet: nothing to read, not an error
    with pytest.raises(AddressError, match="beyond the end"):
        Reader(topic, 5)
    with Writer(topic, 30) as w:
        w.write_many([b"x" * 20] * 4)
    os.remove(topic / segment_name(0))  # as retention does
    with pytest.raises(AddressError, match="no longer"):
        Reader(topic, 0)
    with pytest.raises(AddressError, match="beyond the end"):
        Reader(topic, 10_000)


def test_a_second_writer_on_a_topic_is_refused(tmp_path: Path):
    with Writer(tmp_path / "t") as w:
        with pytest.raises(RuntimeError, match="another Writer"):
            Writer(tmp_path / "t")
        w.write(b"still fine")
    Writer(tmp_path / "t").close()  # released on close


def test_torn_tail_is_cut_on_reopen_logged_and_kept(tmp_path: Path, caplog: pytest.LogCaptureFixture):
    topic = tmp_path / "t"
    with Writer(topic, 1 << 20) as w:
        w.write_many([b"intact"] * 3)
    slab = topic / segment_name(0)
    with open(slab, "ab") as f:
        f.write(frame(b"torn record")[:13])
    with caplog.at_level(logging.WARNING, logger="lab.backends.queuefka"):
        with Writer(topic, 1 << 20) as w:
            assert w.write(b"after") == 42
    assert "cut a torn tail of 13 bytes" in caplog.text and "address 42" in caplog.text
    assert (topic / f"{segment_name(0)}.torn-42").read_bytes() == frame(b"torn record")[:13]
    assert [p for _, p in Reader(topic)] == [b"intact"] * 3 + [b"after"]


def test_garbage_tail_and_lost_bytes_before_an_empty_segment_are_recovered(tmp_path: Path):
    topic = tmp_path / "t"
    with Writer(topic, 40) as w:
        w.write_many([b"y" * 20, b"y" * 20])  # rotates after the 2nd record: segment 56, empty
    assert segments(topic) == [(segment_name(0), 56), (segment_name(56), 0)]
    with open(topic / segment_name(0), "r+b") as f:  # a crash lost the last 10 bytes...
        f.truncate(46)
        f.seek(46)
        f.write(b"\0" * 4)  # ...and left zeros
    with Writer(topic, 40) as w:
        assert w.write(b"z") == 28
    assert [p for _, p in Reader(topic)] == [b"y" * 20, b"z"]


def _fsize_script(topic: Path) -> str:
    return f"""
import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from lab.backends.queuefka import Writer
w = Writer({str(topic)!r}, 1 << 20)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, hard))
acked, errors = [], 0
for i in range(30):
    try:
        acked.append(w.write(b"%03d" % i * 16))   # 56-byte records; flushed below
        w.flush()
    except OSError:
        errors += 1
try:
    w.write(b"big" * 30000)   # over the 64 KiB buffer: written at once, and refused
except OSError:
    errors += 1
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
acked.append(w.write(b"after"))
w.close()
print(errors, *acked)
"""


def test_an_io_error_never_leaves_the_writer_stuck(tmp_path: Path):
    topic = tmp_path / "t"
    out = subprocess.run([sys.executable, "-c", _fsize_script(topic)], capture_output=True, text=True, check=True)
    errors, *acked = map(int, out.stdout.split())
    assert errors >= 2
    records = dict(Reader(topic))
    assert sorted(records) == acked  # every acknowledged write is there, nothing else
    assert records[acked[-1]] == b"after"


def test_follow_sees_records_appended_later(tmp_path: Path):
    topic = tmp_path / "t"
    w = Writer(topic, 100)

    def produce() -> None:
        for i in range(50):
            w.write(b"late-%02d" % i)
            w.flush()
            time.sleep(0.002)
        w.close()

    thread = threading.Thread(target=produce)
    thread.start()
    seen = [p for _, p in Reader(topic).follow(poll=0.005, timeout=0.5)]
    thread.join()
    assert seen == [b"late-%02d" % i for i in range(50)]


def test_fsync_policy_parsing():
    assert FsyncPolicy.parse("always") == FsyncPolicy("always")
    assert FsyncPolicy.parse("250ms") == FsyncPolicy("interval", every_ms=250.0)
    assert FsyncPolicy.parse("1000records") == FsyncPolicy("interval", every_records=1000)
    for bad in ("sometimes", "0ms", "-5records", "xms"):
        with pytest.raises(ValueError, match="fsync policy"):
            FsyncPolicy.parse(bad)


# -- corruption never yields a wrong payload ----------------------------------------------

@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=40),
    hint=st.integers(0, 600),
    damage=st.lists(st.tuples(st.sampled_from(["flip", "truncate", "garbage", "delete"]),
                              st.integers(0, 10**9), st.integers(0, 255)), min_size=1, max_size=4),
    batched=st.booleans(),
)
def test_random_corruption_never_yields_a_wrong_payload(tmp_path_factory, sizes, hint, damage, batched):
    topic = tmp_path_factory.mktemp("fuzz") / "t"
    rng = random.Random(len(sizes) * 7919 + hint)
    payloads = [rng.randbytes(n) for n in sizes]
    with Writer(topic, hint) as w:
        written = dict(zip(w.write_many(payloads), payloads))
    files = sorted(topic.glob("*.slab"))
    for kind, where, byte in damage:
        victim = files[where % len(files)]
        if not victim.exists():
            continue
        data = bytearray(victim.read_bytes())
        if kind == "flip" and data:
            data[where % len(data)] ^= byte or 1
        elif kind == "truncate":
            del data[where % (len(data) + 1):]
        elif kind == "garbage":
            data += bytes([byte]) * (where % 40)
        if kind == "delete":
            victim.unlink()
        else:
            victim.write_bytes(bytes(data))
    bases = sorted(int(p.name[:20]) for p in topic.glob("*.slab"))
    reader = Reader(topic, bases[0] if bases else 0, max_record=1 << 16)
    for _ in range(4 * len(payloads) + 20):  # bounded: never hangs
        try:
            batch = reader.read_many(7) if batched else [r for r in [reader.read()] if r]
        except CorruptRecord as error:
            if error.next_address is None:
                break
            try:
                reader.seek(error.next_address)
            except ValueError:
                break
            continue
        if not batch:
            break
        for address, payload in batch:
            assert written.get(address) == payload
    else:
        pytest.fail("the reader did not reach an end")
