"""Redis as a peer (``lab.peers.redis``): live runs of the real ``redis-server`` judged by its
promises — no fault; a power loss under appendfsync always and no; kill -9 under no; a kill
inside a slow-disk stall under everysec (Redis postpones its AOF write and still replies);
a pause — each leaving no process and no mount behind; the option words; the Locust client's
round trip against a running server."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.design import BadOption
from lab.peers.redis.driver import RedisPeer
from tests.peer_support import first_pick_taken, live, mounts, nothing_lost, processes

# what a fault may do besides losing: an entry claimed by a read the fault cut is claimed
# again, behind newer ones
CLAIMED_AGAIN = "a claimed entry comes back behind newer ones"


def test_appendfsync_takes_redis_words_and_no_is_not_false():
    check = RedisPeer.check_options
    assert check({})["appendfsync"] == "everysec"
    assert check({"appendfsync": False})["appendfsync"] == "no"  # what `--option appendfsync=no` reads as
    with pytest.raises(BadOption, match="always, everysec or no"):
        check({"appendfsync": "sometimes"})


def test_a_no_fault_run_is_valid_and_leaves_nothing_behind(tmp_path: Path):
    before, mounted = processes(b"redis-server"), mounts("redis", tmp_path)
    result = live("redis", "steady", tmp_path, duration=2.0)
    assert result.verdict == "valid", result.check.line()
    assert result.check.counts.lost == 0 and result.check.counts.ok > 500
    assert processes(b"redis-server") - before == set()
    assert mounts("redis", tmp_path) - mounted == set()
    manifest = (result.run_dir / "manifest.json").read_text()
    assert '"package": "redis-server"' in manifest  # which build the verdict is about


def test_a_power_loss_under_appendfsync_always_loses_nothing_acknowledged(tmp_path: Path):
    result = live("redis", "crash", tmp_path, appendfsync="always")
    nothing_lost(result, CLAIMED_AGAIN)
    assert result.check.counts.ok > 500, result.check.line()


def test_a_power_loss_under_appendfsync_no_loses_the_unsynced_aof_as_allowed(tmp_path: Path):
    result = live("redis", "crash", tmp_path, appendfsync="no")
    assert result.verdict == "allowed", result.check.line()
    assert result.check.counts.lost > 0
    assert "appendfsync=no" in result.check.line()


def test_kill_9_under_appendfsync_no_loses_nothing_the_page_cache_holds(tmp_path: Path):
    result = live("redis", "kill", tmp_path, appendfsync="no")
    nothing_lost(result, CLAIMED_AGAIN)
    assert result.check.counts.ok > 500, result.check.line()


def test_a_kill_in_a_slow_fsync_loses_what_everysec_postponed_and_no_loses_nothing(tmp_path: Path):
    everysec = live("redis", "kill-slow-disk", tmp_path / "everysec", appendfsync="everysec")
    assert everysec.verdict == "allowed", everysec.check.line()
    assert everysec.check.counts.lost > 0 and "postpones the AOF write" in everysec.check.line()
    no = live("redis", "kill-slow-disk", tmp_path / "no", appendfsync="no")
    nothing_lost(no, CLAIMED_AGAIN)


def test_a_pause_loses_nothing(tmp_path: Path):
    result = live("redis", "gc-pause", tmp_path, duration=3.0)
    nothing_lost(result, CLAIMED_AGAIN)


def test_the_locust_client_puts_gets_releases_and_acks():
    """The client as a Locust user runs it (blocking calls, here on a worker thread: gevent
    stays out of the test process), against a Redis the peer started."""
    import asyncio

    from lab.design.worlds import LiveWorld
    from lab.peers.redis.load import make_client

    world = LiveWorld()

    def round_trip(address: str, options: dict) -> list:
        client = make_client({"redis": {"redis": address}}, options, True, 0)
        try:
            client.put("q", b"one")
            client.put("q", b"two")
            body, token = client.get("q")
            client.release("q", token)  # claimable at once: it comes back before "two"
            again, token = client.get("q")
            client.ack("q", token)
            second, token = client.get("q")
            client.ack("q", token)
            return [body, again, second, client.get("q")]
        finally:
            client.close()

    async def main(control) -> list:
        peer = RedisPeer(world, {"appendfsync": "always"})
        await peer.start()
        try:
            host, port = peer.address(control)
            return await asyncio.get_running_loop().run_in_executor(None, round_trip, f"{host}:{port}",
                                                                    dict(peer.options))
        finally:
            await peer.stop()

    assert world.run(main) == [b"one", b"one", b"two", None]


def test_a_run_whose_picked_port_was_taken_starts_redis_on_a_fresh_one_and_is_valid(tmp_path: Path, monkeypatch,
                                                                                      caplog):
    """Another process listens on the port picked for Redis before Redis binds it: Redis
    exits ("Address already in use"), starts again on a fresh port, and the run is judged
    as any other."""
    before, mounted = processes(b"redis-server"), mounts("redis", tmp_path)
    with first_pick_taken(monkeypatch, "redis", listen=True) as picks:
        result = live("redis", "steady", tmp_path, duration=1.5)
    assert result.verdict == "valid", result.check.line()
    assert result.check.counts.ok > 200 and result.check.counts.lost == 0
    assert len(picks) == 2 and picks[1]["redis"] != picks[0]["redis"]
    assert any("was taken (its log says 'address already in use')" in r.getMessage() for r in caplog.records)
    assert processes(b"redis-server") - before == set()
    assert mounts("redis", tmp_path) - mounted == set()

