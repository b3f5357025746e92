"""Queuefka under the fault scenarios' findings, in the sim world: a commit never skips
records leased to another reader of the group (split-majority and split-ring lost
acknowledged messages when one consumer's fetch reply was cut and the other committed past
its records), and after a crash cut the log back behind a group's commit, the records
written after the restart are delivered (crash-one, crash-all lost every put after the
restart)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.backends.queuefka.core.broker_api import Config, LeaseLost
from lab.backends.queuefka.embedded import Consumer, Writer, committed_offsets
from lab.worlds.live.disk import FileStore
from lab.history.record import read_samples
from lab.experiments.runner import run
from lab.workloads.spec import load_workload
from tests.queuefka_support import on_a_node


def _lost(run_dir: Path):
    """(msg_id, put start ns) of every acknowledged put never delivered, and the fault rows."""
    samples = read_samples(run_dir).to_pandas()
    puts = samples[(samples.op == "put") & (samples.outcome == "ok")]
    delivered = set(samples[(samples.op == "get") & (samples.outcome == "ok")].msg_id)
    lost = puts[~puts.msg_id.isin(delivered)]
    return dict(zip(lost.msg_id, lost.t_start_ns)), samples[samples.op == "fault"], delivered


# -- 1. a commit does not skip records leased to another session ------------------------------

def test_split_majority_seed_12_a_commit_does_not_skip_records_another_session_fetched():
    """The mechanism split-majority (seed 12) found: consumer c1's long poll was handed
    p0:226 as the split began, and its reply was cut; c0 fetched p0:227 and committed past
    it, and the group's one cumulative offset skipped p0:226 for good. Now the commit
    acknowledges only what its session fetched: the group stays committed at the record
    the other session holds, and that record is handed out again when its session ends."""

    async def body(world, control, cores):
        core = cores[-1]
        addresses = [a for i in range(4) for a in await core.produce("t", [b"r%d" % i])]
        c1, c0 = core.session(), core.session()
        cut = await core.fetch("t", "lab", 1, session=c1)  # its reply never arrives
        mine = await core.fetch("t", "lab", 1, session=c0)
        after_commit = await core.commit("t", "lab", mine.next, session=c0)
        more = await core.fetch("t", "lab", 2, session=c0)
        after_more = await core.commit("t", "lab", more.next, session=c0)
        held = await core.fetch("t", "lab", 5, session=c0)  # nothing else to hand out yet
        core.end_session(c1)  # c1 gave up on the request: its connection closed
        again = await core.fetch("t", "lab", 5, session=c0)
        done = await core.commit("t", "lab", again.next, session=c0)
        return (addresses, cut.records, mine.records, after_commit, after_more, held.records, again.records, done,
                core.stats("t"))

    addresses, cut, mine, after_commit, after_more, held, again, done, stats = on_a_node(body, Config())
    assert cut == [(addresses[0], b"r0")] and mine == [(addresses[1], b"r1")]
    assert after_commit == after_more == addresses[0]  # not past r0, which c1 never acknowledged
    assert held == []  # r0 is still leased to c1
    assert again == [(addresses[0], b"r0")]  # handed out again once c1 is gone
    assert done == stats["end_address"] == stats["groups"]["lab"]["committed"]


def test_records_of_a_session_whose_close_was_lost_come_back_after_the_session_timeout():
    """A split may also swallow the connection's close: then the records come back once the
    session that fetched them has been idle for ``session_timeout``, not before — while
    the other session's commits keep the group's offset before them."""

    async def body(world, control, cores):
        core = cores[-1]
        addresses = [a for i in range(3) for a in await core.produce("t", [b"r%d" % i])]
        gone, alive = core.session(), core.session()
        await core.fetch("t", "g", 1, session=gone)
        fetched_at = control.now()
        seen = []
        for _ in range(4):  # 0.4 s of steady work by the other session
            fetched = await core.fetch("t", "g", 1, wait=0.1, session=alive)
            seen += fetched.records
            if fetched.records:
                await core.commit("t", "g", fetched.next, session=alive)
        before_timeout = core.stats("t")["groups"]["g"]["committed"]
        waited = await core.fetch("t", "g", 1, wait=2.0, session=alive)  # wakes as the lease runs out
        return addresses, seen, before_timeout, waited.records, control.now() - fetched_at

    addresses, seen, before_timeout, waited, after = on_a_node(body, Config(session_timeout=1.0))
    assert seen == [(addresses[1], b"r1"), (addresses[2], b"r2")]
    assert before_timeout == addresses[0]
    assert waited == [(addresses[0], b"r0")] and 1.0 < after < 1.01


def test_one_session_still_commits_all_its_fetches_at_once_but_never_ahead_of_them():
    """A reader alone keeps the cumulative commit: one commit acknowledges every fetch of
    its session before the address. A commit ahead of what was handed out used to skip
    there; it is refused now (a lost lease), so it skips nothing."""

    async def body(world, control, cores):
        core = cores[-1]
        addresses = [a for i in range(6) for a in await core.produce("t", [b"r%d" % i])]
        me = core.session()
        await core.fetch("t", "g", 2, session=me)
        second = await core.fetch("t", "g", 2, session=me)
        committed = await core.commit("t", "g", second.next, session=me)
        with pytest.raises(LeaseLost, match="past every record handed out"):
            await core.commit("t", "g", addresses[5], session=me)
        rest = await core.fetch("t", "g", 5, session=me)
        return addresses, committed, core.stats("t")["groups"]["g"]["committed"], rest.records

    addresses, committed, after_refusal, rest = on_a_node(body, Config())
    assert committed == after_refusal == addresses[4]
    assert rest == [(addresses[4], b"r4"), (addresses[5], b"r5")]


@pytest.mark.parametrize("scenario, options", [("split-majority", {"fsync": "never"}),
                                               ("split-ring", {"fsync": "always"})])
def test_split_majority_seed_12_and_split_ring_seed_13_lose_no_acknowledged_message(tmp_path: Path, scenario: str,
                                                                                    options: dict):
    """split-majority (seed 12) and split-ring (seed 13) each lost p0:226 (INVALID): c0's
    and c1's fetch replies were cut there. Now every acknowledged put is delivered (the
    cut one once the client's timeout closes its connection), and no verdict is invalid."""
    result = run(load_workload(scenario), "queuefka", "sim", out=tmp_path / scenario, progress=False, options=options)
    lost, _, delivered = _lost(result.run_dir)
    assert result.verdict != "invalid" and result.check.counts.lost == 0 and not lost, result.check.line()
    assert "p0:226" in delivered


# -- 2. a crash that cuts the log back behind a commit ------------------------------------------

def test_crash_all_seed_42_records_written_after_the_restart_behind_the_old_commit_are_delivered():
    """The mechanism crash-all (seed 42, fsync=never) found: the group had committed C,
    durably; the crash lost the log's unsynced tail, so the log restarted at E < C and
    wrote its new records at E, E+1 record, ... — below C. The group resumed at the log's
    end (or at C, once the log had grown past it), skipping them. Now recovery commits the
    group at E before any record is written, and every new record is delivered."""

    async def body(world, control, cores):
        before = [a for i in range(20) for a in await cores[-1].produce("t", [b"old%02d" % i])]
        fetched = await cores[-1].fetch("t", "g", 20)
        committed = await cores[-1].commit("t", "g", fetched.next)  # fsynced; the log is not
        world.crash("q")
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        after = [a for i in range(30) for a in await cores[-1].produce("t", [b"new%02d" % i])]
        got = await cores[-1].fetch("t", "g", 100)
        stats = cores[-1].stats("t")
        world.crash("q")  # and the cut-back commit was durable before those records were written
        await control.sleep(0.01)
        world.restart("q")
        await control.sleep(0.01)
        return before, committed, after, got.records, stats, cores[-1].stats("t")["groups"]["g"]["committed"]

    before, committed, after, got, stats, recommitted = on_a_node(body, Config(fsync="never"))
    assert committed == before[-1] + 13
    assert after[0] == 0 < after[-1] and after[-1] + 13 > committed  # the lost tail's addresses, reused
    assert [p for _, p in got] == [b"new%02d" % i for i in range(30)]
    assert stats["groups"]["g"]["committed"] == 0  # cut back to the end the log recovered to
    assert recommitted == 0  # the second crash lost the new records (never fsynced) and kept that commit


def test_on_plain_files_reopening_a_topic_that_lost_its_tail_commits_its_groups_at_the_end(tmp_path: Path):
    """The same on plain files (the embeddable library): reopening the writer of a topic
    whose tail a crash lost commits every group that was past the end at the end, so the
    records it then writes are read; a consumer opening first does the same."""
    topic = tmp_path / "t"
    with Writer(topic) as w:
        addresses = w.write_many([b"old%02d" % i for i in range(10)])
    with Consumer(topic, "g") as c:
        c.poll(10)
        c.commit()
        old_commit = c.committed
    store = FileStore(topic)
    with open(topic / f"{0:020d}.slab", "r+b") as f:  # the crash: the unsynced tail is gone
        f.truncate(addresses[3])
    with Writer(topic) as w:
        assert committed_offsets(store) == {"g": addresses[3]} != {"g": old_commit}
        w.write_many([b"new%02d" % i for i in range(10)])
    with Consumer(topic, "g") as c:
        assert [p for _, p in c.poll(100)] == [b"new%02d" % i for i in range(10)]
    with Consumer(topic, "h") as c:  # a consumer first: it resumes, and commits, at the end
        c.poll(100)
        c.commit()
    with open(topic / f"{0:020d}.slab", "r+b") as f:
        f.truncate(addresses[5])
    with Consumer(topic, "h") as c:
        assert c.committed == addresses[5] and c.poll(1) == []


def test_crash_all_seed_42_loses_no_put_made_after_the_restart(tmp_path: Path):
    """crash-all (seed 42, fsync=never) lost all 330 puts made after the restart and none
    before the crash; the verdict blamed the unsynced tail. Now nothing put after the
    restart is lost, and whatever is lost was put before the crash."""
    result = run(load_workload("crash-all"), "queuefka", "sim", out=tmp_path / "r", progress=False,
                 options={"fsync": "never"})
    lost, faults, _ = _lost(result.run_dir)
    crash = faults[faults.error.str.startswith("start faults[0] ")].t_start_ns.iloc[0]
    assert result.verdict != "invalid", result.check.line()
    assert all(start < crash for start in lost.values()), sorted(lost)[:5]


@pytest.mark.parametrize("seed, options, fault", [
    # a pause longer than the clients' timeout: a fetch cancelled by its timeout advanced the
    # group's shared position, and the other consumer's commit skipped its records
    (23, {}, {"fault": "pause", "at": 0.582, "duration": 1.428, "target": "queuefka-0"}),
    # a record handed out before its fsync, committed past, lost by the crash: the record
    # written at its address after the restart was skipped by the stale commit
    (186, {"fsync": "always"}, {"fault": "crash", "at": 0.94, "duration": 0.057, "target": "servers"}),
])
def test_swarm_seeds_23_and_186_shrunk_lose_no_acknowledged_message(tmp_path, seed, options, fault):
    """lab swarm's shrunk schedules of the two Queuefka findings (seed-23-shrunk.yaml of
    queuefka, seed-186-shrunk.yaml of queuefka with fsync=always), replayed as found."""
    from lab.experiments.runner import run
    from lab.workloads.spec import parse_workload

    duration = {23: 0.375, 186: 0.75}[seed]
    workload = parse_workload({"name": f"swarm-s{seed}-shrunk", "producers": 2, "consumers": 2, "rate": 1000,
                               "duration": duration, "warmup": 0.25, "ack": "reliable", "seed": seed,
                               "faults": [fault]})
    result = run(workload, "queuefka", "sim", out=tmp_path / "run", progress=False, options=options)
    assert result.check.counts.lost == 0 and result.verdict != "invalid", result.check.reason
