"""Which fault, lease or release explains each anomaly (``lab.judge.attribution``), on hand-made
histories: a fault excuses only the messages it could have hurt."""

from __future__ import annotations

import numpy as np
import pytest
import pyarrow as pa

from lab.judge import words
from lab.judge.attribution import attribute, failed_operations
from lab.history.record import mask, message_codes
from lab.design.promises import (ANY_FAULT, AT_LEAST_ONCE, AT_MOST_ONCE, CLOSED, CUT, DEGRADED, FIFO, HOLDERS, NO_ORDER,
                                 Allowance, Promises)
from tests.history import history, with_faults

MS = 1_000_000
UNSYNCED = Allowance("lost", ("crash",), "the unsynced tail", scope=HOLDERS)
WINDOWED = Allowance("lost", ("crash",), "the last 10 ms", scope=HOLDERS, window_s=0.010)


def explain(h: pa.Table, promises: Promises, overtaken: dict[str, int] | None = None):
    """``attribute`` with the counts the checker computes (lost, duplicated per message)."""
    ids, codes = message_codes(h)
    n = len(ids)

    def per(rows: np.ndarray) -> np.ndarray:
        chosen = codes[rows]
        return np.bincount(chosen[chosen >= 0], minlength=n)

    ok = mask(h, "outcome", "ok")
    attempts = per(mask(h, "op", "put"))
    enqueued = per(mask(h, "op", "put") & ok)
    dequeued = np.maximum(per(mask(h, "op", "get") & ok) - per(mask(h, "op", "release")), 0)
    names = ids.to_pylist()
    over = None
    if overtaken is not None:
        over = np.zeros(n, dtype=np.int64)
        for name, k in overtaken.items():
            over[names.index(name)] = k
    a = attribute(h, codes, promises, lost=np.maximum(enqueued - dequeued, 0),
                  duplicated=np.where(attempts > 0, np.maximum(dequeued - attempts, 0), 0), overtaken=over)
    unexplained = {anomaly: sorted(names[c] for c in chosen) for anomaly, chosen in a.unexplained.items()}
    said: dict[str, dict[str, int]] = {}  # each explanation in the words the verdict says it in
    for e, n in a.explained.items():
        said.setdefault(e.anomaly, {})[words.explanation(e)] = n
    return said, unexplained


def puts(*spec: tuple[str, int]) -> list[tuple]:
    """ok puts by p0: (msg_id, start_ms), each 1 ms long."""
    return [("put", "p0", m, "ok", t * MS, MS) for m, t in spec]


def test_a_crash_excuses_what_its_node_held_and_not_what_was_put_after_it():
    h = with_faults(history(*puts(("p0:0", 0), ("p0:1", 5), ("p0:2", 50)), ("get", "c0", "p0:2", "ok", 60 * MS, MS)),
                    ("crash", "server", 20 * MS, 30 * MS), ("crash", "server", 70 * MS, 80 * MS))
    explained, unexplained = explain(h, Promises("D", AT_LEAST_ONCE, FIFO, (UNSYNCED,)))
    assert explained == {"lost": {"under crash: allowed, the unsynced tail": 2}} and unexplained == {}

    # a put after the last crash, never delivered: no crash could have undone it
    h = with_faults(history(*puts(("p0:0", 0), ("p0:1", 50))), ("crash", "server", 20 * MS, 30 * MS))
    explained, unexplained = explain(h, Promises("D", AT_LEAST_ONCE, FIFO, (UNSYNCED,)))
    assert explained["lost"] == {"under crash: allowed, the unsynced tail": 1} and unexplained == {"lost": ["p0:1"]}


def test_a_window_excuses_only_writes_acknowledged_within_it():
    h = with_faults(history(*puts(("p0:0", 0), ("p0:1", 15))), ("crash", "server", 20 * MS, 30 * MS))
    explained, unexplained = explain(h, Promises("D", AT_LEAST_ONCE, FIFO, (WINDOWED,)))
    # p0:0 was acknowledged 19 ms before the crash, outside its 10 ms window; p0:1 4 ms before
    assert explained == {"lost": {"under crash: allowed, the last 10 ms": 1}} and unexplained == {"lost": ["p0:0"]}


def test_a_crash_of_a_client_node_holds_no_message():
    h = with_faults(history(*puts(("p0:0", 0)), ("get", "c0", None, "fail", 2 * MS, MS)),
                    ("crash", "c0", 20 * MS, 30 * MS))
    h = h.set_column(h.schema.get_field_index("node"), "node",
                     pa.array(["c0" if op == "get" else n for op, n in zip(h.column("op").to_pylist(),
                                                                              h.column("node").to_pylist())]))
    _, unexplained = explain(h, Promises("D", AT_LEAST_ONCE, FIFO, (UNSYNCED,)))
    assert unexplained == {"lost": ["p0:0"]}


def test_replicas_excuse_a_loss_only_once_every_copy_is_struck():
    w2 = Allowance("lost", ("disk-loss",), "both copies gone", scope=HOLDERS, copies=2)
    base = history(*puts(("p0:0", 0)))
    _, unexplained = explain(with_faults(base, ("disk-loss", "n1", 20 * MS, 30 * MS)),
                             Promises("P", AT_LEAST_ONCE, NO_ORDER, (w2,)))
    assert unexplained == {"lost": ["p0:0"]}  # one replica too few to lose it
    explained, unexplained = explain(with_faults(base, ("disk-loss", "n1,n2", 20 * MS, 30 * MS)),
                                     Promises("P", AT_LEAST_ONCE, NO_ORDER, (w2,)))
    assert explained == {"lost": {"under disk-loss: allowed, both copies gone": 1}} and unexplained == {}
    _, unexplained = explain(with_faults(base, ("crash", "n1,n2", 20 * MS, 30 * MS)),
                             Promises("P", AT_LEAST_ONCE, NO_ORDER, (w2,)))
    assert unexplained == {"lost": ["p0:0"]}  # a crash is not the fault this allowance names


def test_a_cut_get_explains_one_loss_and_only_of_a_message_put_before_it_ended():
    cut = Allowance("lost", (ANY_FAULT,), "a plain get removed it", scope=CUT)
    h = history(*puts(("p0:0", 0), ("p0:1", 2), ("p0:2", 30)),
                ("get", "c0", None, "info", 10 * MS, 5 * MS))  # a get whose reply never came, ending at 15 ms
    explained, unexplained = explain(h, Promises("M", AT_MOST_ONCE, FIFO, (cut,)))
    assert explained == {"lost": {"after a get whose reply never came: allowed, a plain get removed it": 1}}
    assert unexplained == {"lost": ["p0:1", "p0:2"]}  # one get takes one message; p0:2 came after it
    batch = Allowance("lost", (ANY_FAULT,), "a fetch", scope=CUT, per_get=None)
    _, unexplained = explain(h, Promises("M", AT_MOST_ONCE, FIFO, (batch,)))
    assert unexplained == {"lost": ["p0:2"]}


def test_a_redelivery_after_the_lease_ran_out_unacknowledged_is_part_of_at_least_once():
    leased = Promises("L", AT_LEAST_ONCE, NO_ORDER, lease_s=0.05)
    early = history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 2 * MS, MS),
                    ("get", "c1", "p0:0", "ok", 20 * MS, MS), ("ack", "c1", "p0:0", "ok", 22 * MS, MS))
    explained, unexplained = explain(early, leased)
    assert unexplained == {"duplicated": ["p0:0"]} and explained == {}  # within the lease, with no fault
    late = history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 2 * MS, MS),
                   ("get", "c1", "p0:0", "ok", 60 * MS, MS), ("ack", "c1", "p0:0", "ok", 62 * MS, MS))
    explained, unexplained = explain(late, leased)
    assert explained == {"duplicated": {"after a lease of 0.05 s ran out unacknowledged": 1}} and unexplained == {}
    acked = history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 2 * MS, MS),
                    ("ack", "c0", "p0:0", "ok", 4 * MS, MS), ("get", "c1", "p0:0", "ok", 60 * MS, MS))
    _, unexplained = explain(acked, leased)
    assert unexplained == {"duplicated": ["p0:0"]}  # acknowledged in time: it should have been gone


def test_a_read_handed_back_on_a_broken_connection_and_a_release_are_no_broken_promise():
    closing = Promises("K", AT_LEAST_ONCE, FIFO, hands_back_on_close=True)
    h = history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 2 * MS, MS),
                ("ack", "c0", "p0:0", "info", 4 * MS, MS), ("get", "c1", "p0:0", "ok", 10 * MS, MS))
    explained, unexplained = explain(h, closing)
    assert explained == {"duplicated": {"handed back unacknowledged when its consumer's connection broke": 1}}
    assert unexplained == {}
    _, unexplained = explain(h, Promises("K", AT_LEAST_ONCE, FIFO))  # a design that never hands back
    assert unexplained == {"duplicated": ["p0:0"]}
    released = history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 2 * MS, MS),
                       ("release", "c0", "p0:0", "ok", 4 * MS, MS), ("get", "c1", "p0:0", "ok", 10 * MS, MS))
    assert explain(released, Promises("K", AT_LEAST_ONCE, FIFO)) == ({}, {})  # no duplicate at all


def test_a_servers_restart_hands_back_a_read_whose_consumer_acknowledged_it_only_afterwards():
    """The consumer works on the message while the server crashes and restarts; the read is
    handed back and delivered to another, and the slow consumer's ack, sent on a new
    connection, succeeds: no failure of its own shows the break, the crash does."""
    closing = Promises("K", AT_LEAST_ONCE, FIFO, hands_back_on_close=True)

    def slow_ack(*faults: tuple) -> pa.Table:
        return with_faults(history(*puts(("p0:0", 0)), ("get", "c1", "p0:0", "ok", 1 * MS, MS),
                                   ("get", "c2", "p0:0", "ok", 100 * MS, MS), ("ack", "c2", "p0:0", "ok", 101 * MS, MS),
                                   ("ack", "c1", "p0:0", "ok", 238 * MS, MS)), *faults)

    explained, unexplained = explain(slow_ack(("crash", "kestrel", 18 * MS, 99 * MS)), closing)
    assert explained == {"duplicated": {"handed back unacknowledged when its consumer's connection broke": 1}}
    assert unexplained == {}
    for fault in (("pause", "kestrel", 18 * MS, 99 * MS),  # a pause closes no connection
                  ("crash", "kestrel", 150 * MS, 160 * MS),  # after the redelivery
                  ("crash", "n", 18 * MS, 99 * MS)):  # the clients' node (history's): not a server's restart
        assert explain(slow_ack(fault), closing)[1] == {"duplicated": ["p0:0"]}, fault
    assert explain(slow_ack(("crash", "kestrel", 18 * MS, 99 * MS)), Promises("K", AT_LEAST_ONCE, FIFO))[1] == {
        "duplicated": ["p0:0"]}  # a design that never hands back


def test_a_fault_in_force_explains_an_anomaly_while_it_lasts_and_a_grace_after_its_heal():
    ap = Allowance("duplicated", (ANY_FAULT,), "AP", grace_s=0.010)
    def redelivered_at(t_ms: int) -> pa.Table:
        return with_faults(history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", t_ms * MS, MS),
                                   ("get", "c1", "p0:0", "ok", (t_ms + 2) * MS, MS)),
                           ("partition", "n1", 100 * MS, 200 * MS))
    promises = Promises("P", AT_MOST_ONCE, NO_ORDER, (ap,))
    assert explain(redelivered_at(150), promises)[1] == {}
    assert explain(redelivered_at(205), promises)[1] == {}  # 5 ms after the heal: within the grace
    assert explain(redelivered_at(250), promises)[1] == {"duplicated": ["p0:0"]}
    assert explain(redelivered_at(50), promises)[1] == {"duplicated": ["p0:0"]}  # before the fault


def test_an_overtaken_message_counts_its_inversions_and_is_excused_only_while_a_fault_could_have_delayed_it():
    aborted = Allowance("reordered", (ANY_FAULT,), "an aborted read returns to the head")
    h = with_faults(history(*puts(("p0:0", 0), ("p0:1", 5)), ("get", "c0", "p0:1", "ok", 10 * MS, MS),
                            ("get", "c0", "p0:0", "ok", 12 * MS, MS)), ("pause", "server", 8 * MS, 9 * MS))
    explained, unexplained = explain(h, Promises("K", AT_LEAST_ONCE, FIFO, (aborted,)), overtaken={"p0:0": 1})
    assert explained == {"reordered": {"under pause: allowed, an aborted read returns to the head": 1}}
    clean = history(*puts(("p0:0", 0), ("p0:1", 5)), ("get", "c0", "p0:1", "ok", 10 * MS, MS),
                    ("get", "c0", "p0:0", "ok", 12 * MS, MS))
    assert explain(clean, Promises("K", AT_LEAST_ONCE, FIFO, (aborted,)), overtaken={"p0:0": 3})[1] == {
        "reordered": ["p0:0"]}


def test_an_overtaken_message_is_excused_by_a_closed_connection_only_if_a_read_broke_while_it_waited():
    """CLOSED (a reader whose connection broke hands its fetched records back, behind later
    ones): a consumer's failed or timed-out get or ack while the message waited explains its
    reordering; a fault alone, a producer's failed put or a read that broke later does not."""
    promises = Promises("Q", AT_LEAST_ONCE, FIFO, (Allowance("reordered", (ANY_FAULT,), "handed back", scope=CLOSED),))

    def overtaken_with(*rows: tuple, faults: tuple = ()) -> dict:
        h = history(*puts(("p0:0", 0), ("p0:1", 5)), ("get", "c0", "p0:1", "ok", 10 * MS, MS),
                    ("get", "c0", "p0:0", "ok", 12 * MS, MS), *rows)
        return explain(with_faults(h, *faults) if faults else h, promises, overtaken={"p0:0": 1})[1]

    assert overtaken_with(("ack", "c1", "p0:9", "info", 7 * MS, MS)) == {}
    assert overtaken_with(("get", "c1", None, "fail", 3 * MS, MS)) == {}
    assert overtaken_with(faults=(("crash", "server", 6 * MS, 8 * MS),)) == {"reordered": ["p0:0"]}
    assert overtaken_with(("put", "p0", "p0:2", "fail", 7 * MS, MS)) == {"reordered": ["p0:0"]}
    assert overtaken_with(("ack", "c1", "p0:9", "info", 20 * MS, MS)) == {"reordered": ["p0:0"]}
    with pytest.raises(ValueError, match="reordering only"):
        Allowance("lost", (ANY_FAULT,), "no", scope=CLOSED)


def test_failed_operations_are_counted_by_what_they_were():
    h = history(("put", "p0", "p0:0", "fail"), ("put", "p0", "p0:1", "info"), ("put", "p0", "p0:2", "ok"),
                ("get", "c0", None, "fail"), ("ack", "c0", "p0:2", "info"))
    h = h.set_column(h.schema.get_field_index("error"), "error",
                     pa.array([None, None, None, "empty", None], pa.string()))
    assert failed_operations(h) == {"put": 1, "timed-out put": 1, "failed ack": 1}


# ----------------------------------------------------------------------------- scopes of replicated designs

def two_copies(*faults: tuple[str, str, int, int | None]) -> pa.Table:
    """A primary n1 and its backup n2: p0:0 put at 0 ms, p0:1 at 50 ms; neither delivered."""
    return with_faults(history(*puts(("p0:0", 0), ("p0:1", 50))), *faults)


LONE = Allowance("lost", ("crash",), "acknowledged by a primary serving alone", scope=DEGRADED,
                 after=("crash", "partition"))


def test_a_degraded_acknowledgement_excuses_a_loss_after_a_lone_primary_crashed_and_not_one_with_both_copies():
    promises = Promises("PB", AT_LEAST_ONCE, FIFO, (LONE,))
    # the backup is down from 40 to 100 ms: p0:1 is acknowledged by the primary alone, which crashes at 60 ms
    explained, unexplained = explain(two_copies(("crash", "n2", 40 * MS, 100 * MS), ("crash", "n1", 60 * MS, 70 * MS)),
                                     promises)
    assert explained == {"lost": {"under crash, crash: allowed, acknowledged by a primary serving alone": 1}}
    assert unexplained == {"lost": ["p0:0"]}  # acknowledged while both copies existed: a broken promise
    # a partition that cut the backup off degrades it the same way
    cut = ("partition", "n2,n1,n", 40 * MS, 100 * MS, "n2 | n1 n")  # n: the clients' node
    _, unexplained = explain(two_copies(cut, ("crash", "n1", 60 * MS, 70 * MS)), promises)
    assert unexplained == {"lost": ["p0:0"]}
    # ... and so does a split of the two servers alone, whichever side then serves alone and
    # crashes: a partition takes no node out, it cuts each side off from the other
    split = ("partition", "n1,n2", 40 * MS, 100 * MS, "n1 | n2")
    for lone in ("n1", "n2"):
        _, unexplained = explain(two_copies(split, ("crash", lone, 60 * MS, 70 * MS)), promises)
        assert unexplained == {"lost": ["p0:0"]}, lone
    # a partition of the clients from both servers leaves both copies: nothing excused
    clients = ("partition", "n,n1,n2", 40 * MS, 100 * MS, "n | n1 n2")
    _, unexplained = explain(two_copies(clients, ("crash", "n1", 60 * MS, 70 * MS)), promises)
    assert unexplained == {"lost": ["p0:0", "p0:1"]}
    # the primary crashing alone (nothing degraded first), or only the already missing backup: nothing excused
    _, unexplained = explain(two_copies(("crash", "n1", 60 * MS, 70 * MS)), promises)
    assert unexplained == {"lost": ["p0:0", "p0:1"]}
    _, unexplained = explain(two_copies(("crash", "n2", 40 * MS, 100 * MS), ("crash", "n2", 120 * MS, 130 * MS)),
                             promises)
    assert unexplained == {"lost": ["p0:0", "p0:1"]}
    # the backup healed before the put: the put had both copies again
    _, unexplained = explain(two_copies(("crash", "n2", 10 * MS, 45 * MS), ("crash", "n1", 60 * MS, 70 * MS)),
                             promises)
    assert unexplained == {"lost": ["p0:0", "p0:1"]}
    with pytest.raises(ValueError, match="after="):
        Allowance("lost", ("crash",), "no degrading fault named", scope=DEGRADED)


def test_an_ordered_combination_excuses_only_its_second_fault_after_its_first():
    then = Allowance("lost", ("crash",), "a partition, then a crash", scope=HOLDERS, after=("partition",))
    promises = Promises("Q", AT_LEAST_ONCE, FIFO, (then,))
    _, unexplained = explain(two_copies(("crash", "n1", 60 * MS, 70 * MS)), promises)
    assert unexplained == {"lost": ["p0:0", "p0:1"]}  # a crash alone
    explained, unexplained = explain(two_copies(("partition", "n2", 55 * MS, 65 * MS), ("crash", "n1", 60 * MS, 70 * MS)),
                                     promises)
    assert explained == {"lost": {"under partition, crash: allowed, a partition, then a crash": 2}} and unexplained == {}
    # the crash first, the partition after it: not the combination named
    _, unexplained = explain(two_copies(("crash", "n1", 60 * MS, 70 * MS), ("partition", "n2", 80 * MS, 90 * MS)),
                             promises)
    assert unexplained == {"lost": ["p0:0", "p0:1"]}
    assert "under partition, then crash of the node that held it" in then.hurts()


def test_a_redelivery_is_excused_only_by_a_fault_that_began_before_its_delivery_was_settled():
    ap = Allowance("duplicated", (ANY_FAULT,), "AP", grace_s=0.010)
    promises = Promises("P", AT_MOST_ONCE, NO_ORDER, (ap,))

    def acked_then_again_at(t_ms: int) -> pa.Table:
        return with_faults(history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 150 * MS, MS),
                                   ("ack", "c0", "p0:0", "ok", 152 * MS, MS),
                                   ("get", "c1", "p0:0", "ok", t_ms * MS, MS)),
                           ("partition", "n1", 100 * MS, 200 * MS))
    assert explain(acked_then_again_at(190), promises)[1] == {}  # while the partition lasts
    assert explain(acked_then_again_at(205), promises)[1] == {}  # within the grace after its heal
    # long after the heal, still excused: a delayed ack may arrive late (the delay is not in the history)
    assert explain(acked_then_again_at(400), promises)[1] == {}
    # a fault that began only after the delivery was acknowledged (and its grace) did not cause it
    late = with_faults(history(*puts(("p0:0", 0)), ("get", "c0", "p0:0", "ok", 10 * MS, MS),
                               ("ack", "c0", "p0:0", "ok", 12 * MS, MS), ("get", "c1", "p0:0", "ok", 150 * MS, MS)),
                       ("partition", "n1", 100 * MS, 200 * MS))
    assert explain(late, promises)[1] == {"duplicated": ["p0:0"]}


def test_a_valid_runs_expected_duplicates_are_not_called_allowed():
    from lab.judge.findings import Cause, Counts, Explanation, Verdict
    from lab.judge.verdict import judge

    promises = Promises("K", AT_LEAST_ONCE, FIFO, (Allowance("duplicated", ("crash",), "unsynced removals"),))
    why = Explanation("duplicated", Cause.FAULT, ("crash",), "unsynced removals")
    judged = judge(promises, frozenset({"crash"}), Counts(10, 10, 11, ok=10, duplicated=1), {why: 1})
    assert judged.verdict is Verdict.VALID
    assert "allowed" not in judged.reason and "as promised, unsynced removals" in judged.reason
