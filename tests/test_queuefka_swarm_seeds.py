"""Queuefka with ``fsync=always`` lost acknowledged messages at ``lab swarm`` seeds 20, 49 and
58 (issue 29, blind spot 5), with no bug planted: after a restart the broker's leases were
gone, and a commit carrying an address from a consumer's fetch before the crash was taken
as a commit ahead of everything handed out — the group skipped records nobody had
acknowledged (49: one leased before the crash to a fetch whose reply was lost; 20 and 58: one
written after the crash at the bytes the crash had freed). Now every fetch reports the
broker's epoch (its incarnation), and a commit with another epoch, or of an address past
every record handed out, is a lost lease: refused, nothing acknowledged, the records handed
out again.

First the mechanism on a core, then the seeds' runs as the swarm found them (the schedule
pinned: the swarm draws from the world's fault kinds, so a new kind changes every seed's
draw), each asserting its verdict and that every acknowledged put is delivered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.backends.queuefka.core.broker_api import Config, LeaseLost
from lab.backends.queuefka.wire.http import EPOCH_HEADER, accept_http
from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.workloads.spec import parse_workload
from lab.design.http_client import ResponseReader, encode_request
from tests.queuefka_support import on_a_node


async def _restart(world, control) -> None:
    world.crash("q")
    await control.sleep(0.01)
    world.restart("q")
    await control.sleep(0.01)


# -- the mechanism, on a core ------------------------------------------------------------------

def test_seed_49_a_commit_from_before_a_restart_does_not_skip_a_record_whose_fetch_reply_was_lost():
    """c1 fetched r0 and its reply was lost; c0 fetched r1, r2 and committed r1: the group
    stays committed at r0, which c1 holds. The broker restarts (the leases are gone), and
    c0 commits what it had fetched before: that used to skip to after r2, past r0 for good.
    Now it is refused (the fetch's epoch is the old incarnation's); and the restart hands
    out again exactly what was not acknowledged — r0 first, then r2 and what follows, never
    r1, which c0 acknowledged before the crash."""

    async def body(world, control, cores):
        addresses = [a for i in range(4) for a in await cores[-1].produce("t", [b"r%d" % i])]
        c1, c0 = cores[-1].session(), cores[-1].session()
        await cores[-1].fetch("t", "lab", 1, session=c1)  # its reply never arrives
        mine = await cores[-1].fetch("t", "lab", 2, session=c0)
        committed = await cores[-1].commit("t", "lab", mine.records[1][0], session=c0, epoch=mine.epoch)
        await _restart(world, control)
        core = cores[-1]
        again = core.session()
        with pytest.raises(LeaseLost) as refused:
            await core.commit("t", "lab", mine.next, session=again, epoch=mine.epoch)
        after = core.stats("t")["groups"]["lab"]["committed"]
        handed = []
        while fetched := (await core.fetch("t", "lab", 5, session=again)).records:
            handed += fetched
        return addresses, committed, mine.epoch, str(refused.value), after, core.epoch, handed

    addresses, committed, old_epoch, refusal, after, epoch, handed = on_a_node(body, Config(fsync="always"))
    assert committed == after == addresses[0]  # r0 was never acknowledged, before or after
    assert "earlier incarnation of the broker" in refusal and "nothing was acknowledged" in refusal
    assert epoch != old_epoch
    assert [p for _, p in handed] == [b"r0", b"r2", b"r3"]  # r0 first, nothing skipped, r1 not again


def test_a_commit_past_every_record_handed_out_since_a_restart_is_refused_even_without_the_epoch():
    """A client that does not send the epoch back (curl) is still refused an address past
    every record handed out: it would skip records nobody processed."""

    async def body(world, control, cores):
        addresses = [a for i in range(4) for a in await cores[-1].produce("t", [b"r%d" % i])]
        early = await cores[-1].fetch("t", "lab", 3)  # never committed
        await _restart(world, control)
        with pytest.raises(LeaseLost, match="past every record handed out since the broker started"):
            await cores[-1].commit("t", "lab", early.next)
        return addresses, (await cores[-1].fetch("t", "lab", 5)).records

    addresses, handed = on_a_node(body, Config(fsync="always"))
    assert [p for _, p in handed] == [b"r0", b"r1", b"r2", b"r3"]


def test_seed_20_and_58_a_commit_from_before_a_restart_does_not_acknowledge_the_record_now_at_its_address():
    """A record is handed out before its fsync completes, and the crash loses it (its put
    was never acknowledged). After the restart the next record is written at the same
    bytes and leased to another reader; the stale commit of the lost record's address used
    to acknowledge (or skip) it — lost if that reader's reply is cut. Now the epoch
    refuses it, and the new record is still unacknowledged and handed out again."""

    async def body(world, control, cores):
        core = cores[-1]
        kept = [a for i in range(2) for a in await core.produce("t", [b"old%d" % i])]
        reader = core.session()
        first = await core.fetch("t", "lab", 2, session=reader)
        await core.commit("t", "lab", first.next, session=reader, epoch=first.epoch)
        core.rt.spawn(core.produce("t", [b"gone"]))  # written and readable; its fsync is under way
        await control.sleep(0)
        early = await core.fetch("t", "lab", 1, session=reader)
        await _restart(world, control)  # before that fsync completed: the record is lost
        core = cores[-1]
        [reused] = await core.produce("t", [b"next"])
        other = core.session()
        taken = await core.fetch("t", "lab", 1, session=other)  # and, say, its reply is cut
        with pytest.raises(LeaseLost, match="earlier incarnation"):
            await core.commit("t", "lab", early.next, session=core.session(), epoch=early.epoch)
        committed = core.stats("t")["groups"]["lab"]["committed"]
        core.end_session(other)
        again = await core.fetch("t", "lab", 5, session=core.session())
        return kept, first.next, early.records, reused, taken.records, committed, again.records

    kept, after_kept, early, reused, taken, committed, again = on_a_node(body, Config(fsync="always"))
    assert early == [(after_kept, b"gone")]  # handed out before it was durable
    assert reused == after_kept  # the crash freed those bytes: the next record has its address
    assert taken == [(reused, b"next")]
    assert committed == reused  # "next" is not acknowledged by the stale commit
    assert again == [(reused, b"next")]  # and comes back once its reader is gone


def test_within_one_incarnation_a_commit_from_another_connection_still_acknowledges_its_fetch():
    """What a lost lease is not: a reader that fetched, lost its connection (the lease
    handed back) and commits on a new one — as curl does, one connection per request —
    within one incarnation still acknowledges what it fetched; an address already
    acknowledged is a no-op."""

    async def body(world, control, cores):
        core = cores[-1]
        addresses = [a for i in range(3) for a in await core.produce("t", [b"r%d" % i])]
        gone = core.session()
        fetched = await core.fetch("t", "g", 2, session=gone)
        core.end_session(gone)
        committed = await core.commit("t", "g", fetched.next, session=core.session(), epoch=fetched.epoch)
        repeated = await core.commit("t", "g", fetched.records[1][0], session=core.session(), epoch=fetched.epoch)
        rest = await core.fetch("t", "g", 5, session=core.session())
        return addresses, committed, repeated, rest.records

    addresses, committed, repeated, rest = on_a_node(body, Config())
    assert committed == repeated == addresses[2]
    assert rest == [(addresses[2], b"r2")]


def test_the_http_front_reports_the_epoch_and_refuses_a_stale_one_with_a_409():
    """Every fetch's reply carries ``Queuefka-Epoch``; a commit that sends back another
    incarnation's is a 409 that names the lost lease, and writes nothing; one that is no
    number is a 400; the right one commits."""

    async def body(world, control, cores):
        core = cores[-1]
        await core.produce("t", [b"one", b"two"])
        connection = accept_http(core)()

        async def call(method, target, body=b"", headers=()):
            return ResponseReader(method)(await _drive(connection, encode_request(method, target, "q", body,
                                                                                   headers)))

        got = await call("GET", "/topics/t/messages?group=g&max=2")
        raw = await call("GET", "/topics/t/messages?group=h&format=raw")
        epoch = got.headers[EPOCH_HEADER.lower()]
        end = json.loads(got.body)["next"]
        commit = b'{"address": %d}' % end
        stale = await call("POST", "/topics/t/groups/g/commit", commit, ((EPOCH_HEADER, str(int(epoch) ^ 1)),))
        bad = await call("POST", "/topics/t/groups/g/commit", commit, ((EPOCH_HEADER, "soon"),))
        groups_after_refusals = core.stats("t")["groups"]
        ok = await call("POST", "/topics/t/groups/g/commit", commit, ((EPOCH_HEADER, epoch),))
        return epoch, raw.headers[EPOCH_HEADER.lower()], core.epoch, stale, bad, ok, end, groups_after_refusals

    epoch, raw_epoch, core_epoch, stale, bad, ok, end, groups_after_refusals = on_a_node(body, Config())
    assert epoch == raw_epoch == str(core_epoch)
    assert stale.status == 409 and b"lease lost" in stale.body and b"nothing was acknowledged" in stale.body
    assert groups_after_refusals == {}  # neither refusal created the group
    assert bad.status == 400 and EPOCH_HEADER.encode() in bad.body
    assert (ok.status, json.loads(ok.body)) == (200, {"committed": end})


async def _drive(connection, data: bytes) -> bytes:
    """Feed one request's bytes to a sans-IO server connection; what it sent back."""
    sent: list[bytes] = []

    async def send(out: bytes) -> None:
        sent.append(out)

    connection.feed(data)
    while (request := connection.next_request()) is not None:
        await connection.handle(request, send)
    return b"".join(sent)


# -- the seeds' runs, as the swarm found and shrank them ----------------------------------------

#: ``lab swarm --backend queuefka --option fsync=always``'s findings, shrunk (seed-S-shrunk.yaml);
#: each lost one acknowledged message before the fix (INVALID).
SHRUNK = {
    20: {"rate": 1000, "duration": 3, "faults": [
        {"fault": "loss", "at": 1.052, "duration": 0.056, "target": "p1", "p": 0.6},
        {"fault": "crash", "at": 2.181, "duration": 0.05, "target": "queuefka-0"}]},
    49: {"rate": 250.0, "duration": 3, "faults": [
        {"fault": "loss", "at": 1.357, "duration": 0.077, "target": "minority", "p": 0.05},
        {"fault": "crash", "at": 2.452, "duration": 0.065, "target": "server", "tear": True}]},
    58: {"rate": 1000, "duration": 0.375, "warmup": 0.5, "faults": [
        {"fault": "crash", "at": 0.719, "duration": 0.053, "target": "servers"}]},
}


def _run_shrunk(seed: int, out: Path):
    workload = parse_workload({"name": f"swarm-s{seed}-shrunk", "queues": 1, "producers": 2, "consumers": 2,
                               "message_size": 100, "ack": "reliable", "seed": seed, **SHRUNK[seed]})
    return run(workload, "queuefka", "sim", seed=seed, out=out, progress=False, options={"fsync": "always"})


def _acknowledged_and_undelivered(run_dir: Path) -> set[str]:
    samples = read_samples(run_dir).to_pandas()
    acknowledged = set(samples[(samples.op == "put") & (samples.outcome == "ok")].msg_id)
    delivered = set(samples[(samples.op == "get") & (samples.outcome == "ok")].msg_id)
    return acknowledged - delivered


def _assert_nothing_acknowledged_is_lost(seed: int, out: Path) -> None:
    result = _run_shrunk(seed, out)
    verdict = result.check
    assert verdict.verdict != "invalid" and verdict.counts.lost == 0, verdict.line()
    assert not _acknowledged_and_undelivered(result.run_dir)
    assert verdict.counts.ok > 0 and verdict.counts.dequeued > 0  # the run is evidence: puts made and delivered


def test_seed_20_a_record_written_after_the_crash_at_freed_bytes_is_not_skipped(tmp_path: Path):
    _assert_nothing_acknowledged_is_lost(20, tmp_path / "run")


def test_seed_49_a_record_leased_to_a_lost_fetch_reply_before_the_crash_is_not_skipped(tmp_path: Path):
    _assert_nothing_acknowledged_is_lost(49, tmp_path / "run")


def test_seed_58_a_crash_right_after_a_fetch_skips_nothing(tmp_path: Path):
    _assert_nothing_acknowledged_is_lost(58, tmp_path / "run")
