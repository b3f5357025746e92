"""`primary_backup`'s tests: unit tests of the replicated state, and the lab's conformance
battery (the same checks `lab conform primary_backup` prints as a checklist)."""

from primary_backup.core.queue import State

from lab.experiments.conform import assert_conforms


def test_ops_and_idempotence():
    s = State()
    assert s.apply(("put", "q", "m1", b"a")) and not s.apply(("put", "q", "m1", b"a"))  # a retried put
    s.apply(("put", "q", "m2", b"b"))
    s.apply(("open", "q", "m1", "r1"))
    assert s.head("q") == "m2"
    assert s.apply(("release", "r1")) and s.head("q") == "m1"  # back at the head
    s.apply(("open", "q", "m1", "r2"))
    assert s.apply(("ack", "r2")) and s.apply(("ack", "r2"))  # a retried ack answers as settled
    assert "m1" in s.acked and "m1" not in s.bodies


def test_merge_keeps_what_the_old_primary_acknowledged():
    new, old = State(), State()
    for st in (new, old):
        st.apply(("put", "q", "m1", b"a"))
    old.apply(("put", "q", "m2", b"b"))  # acknowledged by the old primary alone
    old.apply(("open", "q", "m1", "r1"))
    old.apply(("ack", "r1"))
    new.merge(old.snapshot())
    assert list(new.queues["q"]) == ["m2"] and "m1" in new.acked
    again = State.from_snapshot(new.snapshot())
    assert again.snapshot() == new.snapshot()


def test_conforms():
    # drop quick=True for the whole battery (minutes); seeds=10 hunts each mutant and fault harder
    assert_conforms("primary_backup", quick=True)
