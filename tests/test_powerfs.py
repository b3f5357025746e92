"""The power-loss file system (lab/worlds/live/powerfs): every write not fsynced is undone by
a crash and every synced one kept — fsync, fdatasync, O_SYNC, O_DSYNC; overwrites, truncates
and renamed files come back as they were at their sync; the kernel serves no pre-crash data;
and the mount and its process never outlive ``stop``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.worlds.live.powerfs import PowerFs, unavailable
from lab.worlds.live.powerfs.mount import mounted

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=f"FUSE unavailable: {unavailable()}")


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def fs(tmp_path):
    """A mounted PowerFs over ``tmp_path/backing``; after the test: no mount, no child."""
    power = PowerFs(tmp_path / "backing", tmp_path / "mnt").start()
    pid = power.proc.pid
    try:
        yield power
    finally:
        power.stop()
        assert not mounted(tmp_path / "mnt")
        assert _gone(pid)


def _synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _append(path: Path, data: bytes, flags: int = 0) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | flags)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def test_unsynced_appends_are_undone_by_a_crash(fs):
    f = fs.mountpoint / "log"
    _synced(f, b"a" * 1000)
    for _ in range(5):
        _append(f, b"b" * 200)
    assert f.stat().st_size == 2000
    assert fs.stats() == (1, 1000)
    assert fs.crash() == (1000, 1)
    assert f.stat().st_size == 1000
    assert f.read_bytes() == b"a" * 1000
    assert fs.stats() == (0, 0)


@pytest.mark.parametrize("sync", [os.fsync, os.fdatasync])
def test_synced_writes_are_kept(fs, sync):
    f = fs.mountpoint / "log"
    _synced(f, b"")
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    os.write(fd, b"kept")
    sync(fd)
    os.write(fd, b"lost")
    os.close(fd)
    assert fs.crash() == (4, 1)
    assert f.read_bytes() == b"kept"


@pytest.mark.parametrize("flag", [os.O_SYNC, os.O_DSYNC], ids=["O_SYNC", "O_DSYNC"])
def test_writes_through_a_sync_descriptor_are_kept(fs, flag):
    f = fs.mountpoint / "log"
    _synced(f, b"head")
    _append(f, b"-synced", flag)
    assert fs.stats() == (0, 0)
    assert fs.crash() == (0, 0)
    assert f.read_bytes() == b"head-synced"


def test_an_overwrite_in_the_middle_after_a_sync_is_restored(fs):
    f = fs.mountpoint / "data"
    _synced(f, bytes(range(256)) * 4)
    fd = os.open(f, os.O_RDWR)
    os.pwrite(fd, b"X" * 100, 300)
    os.pwrite(fd, b"Y" * 50, 350)  # over the first overwrite: the oldest bytes must win
    os.close(fd)
    assert f.read_bytes()[350:400] == b"Y" * 50
    fs.crash()
    assert f.read_bytes() == bytes(range(256)) * 4


def test_a_truncate_after_a_sync_is_restored(fs):
    f = fs.mountpoint / "data"
    original = os.urandom(5000)
    _synced(f, original)
    os.truncate(f, 1234)
    assert f.stat().st_size == 1234
    assert fs.crash() == (5000 - 1234, 1)
    assert f.stat().st_size == 5000
    assert f.read_bytes() == original


def test_an_open_with_o_trunc_after_a_sync_is_restored(fs):
    f = fs.mountpoint / "data"
    _synced(f, b"synced bytes")
    f.write_bytes(b"new")  # open(O_TRUNC), write, close: no sync
    fs.crash()
    assert f.read_bytes() == b"synced bytes"


def test_a_renamed_file_keeps_its_name_and_synced_bytes_and_loses_its_unsynced_writes(fs):
    old, new = fs.mountpoint / "segment.tmp", fs.mountpoint / "segment"
    _synced(old, b"synced")
    os.rename(old, new)
    _append(new, b"+unsynced")
    fs.crash()
    assert not old.exists()
    assert new.read_bytes() == b"synced"


def test_a_read_right_after_a_crash_returns_the_rolled_back_bytes(fs):
    f = fs.mountpoint / "data"
    _synced(f, b"A" * 4096)
    fd = os.open(f, os.O_RDWR)
    os.pwrite(fd, b"B" * 4096, 0)
    os.pwrite(fd, b"C" * 4096, 4096)
    assert os.pread(fd, 8192, 0) == b"B" * 4096 + b"C" * 4096  # what a page cache would hold
    fs.crash()
    assert os.pread(fd, 8192, 0) == b"A" * 4096  # the same descriptor: no cached pages
    assert os.fstat(fd).st_size == 4096
    os.close(fd)
    assert f.read_bytes() == b"A" * 4096  # a new open: no cached size either


def test_checkpoint_makes_everything_so_far_durable(fs):
    f = fs.mountpoint / "log"
    _synced(f, b"")
    _append(f, b"before checkpoint")
    fs.checkpoint()
    assert fs.stats() == (0, 0)
    _append(f, b", after")
    fs.crash()
    assert f.read_bytes() == b"before checkpoint"


def test_a_writer_killed_holding_its_descriptor_then_a_crash_leaves_the_synced_bytes(fs):
    f = fs.mountpoint / "aof"
    writer = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time\n"
         "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)\n"
         "os.write(fd, b'synced;'); os.fsync(fd); os.write(fd, b'unsynced;')\n"
         "print('ready', flush=True); time.sleep(60)\n", str(f)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        writer.send_signal(signal.SIGKILL)  # kill -9: the page cache (here, the backing file) survives
        writer.wait(10)
        assert f.read_bytes() == b"synced;unsynced;"
        assert fs.crash() == (len(b"unsynced;"), 1)
        assert f.read_bytes() == b"synced;"
    finally:
        writer.kill()
        writer.wait()


def test_stop_after_the_child_was_killed_still_removes_the_mount(tmp_path):
    power = PowerFs(tmp_path / "backing", tmp_path / "mnt").start()
    pid = power.proc.pid
    os.kill(pid, signal.SIGKILL)
    power.proc.wait(10)
    with pytest.raises(OSError):  # "Transport endpoint is not connected"
        os.listdir(tmp_path / "mnt")
    assert mounted(tmp_path / "mnt")
    power.stop()
    power.stop()  # idempotent
    assert not mounted(tmp_path / "mnt")
    assert _gone(pid)
    assert os.listdir(tmp_path / "mnt") == []


def test_unavailable_is_none_here_and_names_fuse3_without_fusermount3(monkeypatch, tmp_path):
    assert unavailable() is None
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert shutil.which("fusermount3") is None
    reason = unavailable()
    assert reason is not None and "fuse3" in reason
    with pytest.raises(RuntimeError, match="fuse3"):
        PowerFs(tmp_path / "b", tmp_path / "m").start()


def test_the_backing_folder_holds_the_files_after_stop(tmp_path):
    with PowerFs(tmp_path / "backing", tmp_path / "mnt") as power:
        (power.mountpoint / "d").mkdir()
        _synced(power.mountpoint / "d" / "f", b"bytes")
        assert sorted(os.listdir(power.mountpoint)) == ["d"]
        assert power.stats() == (0, 0)
    assert (tmp_path / "backing" / "d" / "f").read_bytes() == b"bytes"
    assert not mounted(tmp_path / "mnt")


def test_a_delay_slows_every_sync_and_no_other_request(fs):
    """The disk-delay fault on a broker: its fsyncs wait, its plain writes and reads do not."""
    import time

    f = fs.mountpoint / "slow"
    _synced(f, b"x")
    fs.delay(300_000_000)  # 0.3 s per sync
    fd = os.open(f, os.O_WRONLY | os.O_APPEND)
    try:
        started = time.monotonic()
        os.write(fd, b"y" * 100)
        written = time.monotonic() - started
        os.fsync(fd)
        synced = time.monotonic() - started
    finally:
        os.close(fd)
    assert written < 0.2 <= 0.3 <= synced
    fs.delay(0)
    started = time.monotonic()
    _synced(f, b"z")
    assert time.monotonic() - started < 0.2
