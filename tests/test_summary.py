"""The run summary (`lab run`): every row names the phases it covers, and its measured
end-to-end rows use the Spark pipeline's rule (a message counts in its first delivery's phase)."""

from __future__ import annotations

from lab.history.record import Recorder
from lab.judge.summary import PHASES_NOTE, end_to_end_ns, format_spark_summary, format_table, summarize

MS = 1_000_000


def samples():
    r = Recorder("run", "sim", "ideal", "hand")
    # m1: put in warm-up, first delivered in steady (10 ms), delivered again in the drain.
    r.record(node="n", client="p", op="put", queue="q", msg_id="p:1", t_start_ns=0, latency_ns=1 * MS, outcome="ok",
             nbytes=10, phase="warmup")
    r.record(node="n", client="c", op="get", queue="q", msg_id="p:1", t_start_ns=9 * MS, latency_ns=1 * MS,
             outcome="ok", nbytes=10, phase="steady")
    r.record(node="n", client="c", op="get", queue="q", msg_id="p:1", t_start_ns=50 * MS, latency_ns=1 * MS,
             outcome="ok", nbytes=10, phase="drain")
    # m2: put in steady, first delivered in the drain (70 ms).
    r.record(node="n", client="p", op="put", queue="q", msg_id="p:2", t_start_ns=20 * MS, latency_ns=1 * MS,
             outcome="ok", nbytes=10, phase="steady")
    r.record(node="n", client="c", op="get", queue="q", msg_id="p:2", t_start_ns=89 * MS, latency_ns=1 * MS,
             outcome="ok", nbytes=10, phase="drain")
    # m3: put in steady, delivered in a fault (5 ms).
    r.record(node="n", client="p", op="put", queue="q", msg_id="p:3", t_start_ns=30 * MS, latency_ns=1 * MS,
             outcome="ok", nbytes=10, phase="steady")
    r.record(node="n", client="c", op="get", queue="q", msg_id="p:3", t_start_ns=34 * MS, latency_ns=1 * MS,
             outcome="ok", nbytes=10, phase="fault")
    return r.table()


def test_end_to_end_counts_a_message_in_the_phase_of_its_first_delivery():
    table = samples()
    assert sorted(end_to_end_ns(table).tolist()) == [5 * MS, 10 * MS, 70 * MS]
    assert sorted(end_to_end_ns(table, ("steady", "fault", "heal")).tolist()) == [5 * MS, 10 * MS]
    assert end_to_end_ns(table, ("drain",)).tolist() == [70 * MS]


def test_the_summary_has_whole_run_and_measured_rows_and_the_table_names_them():
    summary = summarize(samples())
    assert summary["e2e"]["count"] == 3 and summary["measured"]["e2e"]["count"] == 2
    assert summary["put"]["count"] == 3 and summary["measured"]["put"]["count"] == 2  # the warm-up put is out
    assert summary["get"]["count"] == 4 and summary["measured"]["get"]["count"] == 2
    lines = format_table(summary).splitlines()
    assert lines[0].split()[:2] == ["op", "phases"]
    rows = {tuple(line.split()[:2]) for line in lines[1:-1]}
    assert {("put", "all"), ("e2e", "all"), ("put", "measured"), ("e2e", "measured")} <= rows
    assert lines[-1] == PHASES_NOTE and "steady, fault, heal" in PHASES_NOTE


def test_the_spark_summary_for_people_names_its_phases():
    import pandas as pd

    row = {"run_id": "r1", "op": "e2e", "count": 2, "ok": 2, "tput_p50": 5.0, "p50_ns": 1e6, "p99_ns": 2e6,
           "p999_ns": 2e6, "p9999_ns": 2e6}
    frame = pd.DataFrame([{**row, "phase": "measured"}, {**row, "phase": "drain", "run_id": "r2"}])
    lines = format_spark_summary(frame).splitlines()
    assert lines[0] == "measured phases (steady, fault, heal; not warm-up or drain):"
    assert [line.split()[0] for line in lines[2:]] == ["r1"]
