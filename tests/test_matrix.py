"""`lab matrix` and the time to recover after a heal: a cell per design, option set and
scenario over seeds, its worst verdict, summed counts, per-phase latency from the Spark
pipeline, recovery held to the scenario's budget; bad option sets fail before any run; the
command exits 1 when a cell is INVALID and only then."""

from __future__ import annotations

import csv

import pytest

from lab.cli import main
from lab.experiments.matrix import run_matrix
from lab.experiments.planting import plant
from lab.history.phases import fault_text
from lab.history.record import Recorder
from lab.judge.recovery import time_to_recover
from lab.judge.findings import Verdict

MS = 1_000_000


def _history(*ops: tuple) -> Recorder:
    """(op, client, msg_id, outcome, start_ms, latency_ms[, fault text]) rows."""
    rec = Recorder("r", "sim", "hand", "hand-made")
    for op, client, msg_id, outcome, start, latency, *text in ops:
        rec.record(node="n", client=client, op=op, queue="q0", msg_id=msg_id, t_start_ns=start * MS,
                   latency_ns=latency * MS, outcome=outcome, error=text[0] if text else None, nbytes=1, phase="steady")
    return rec


def test_recovery_is_the_last_first_delivery_of_what_was_acknowledged_before_the_heal():
    rec = _history(("put", "p0", "p0:1", "ok", 0, 1), ("put", "p0", "p0:2", "ok", 10, 1),
                   ("fault", "nemesis", None, "info", 20, 0, fault_text("start", 0, "pause", "s0")),
                   ("put", "p0", "p0:3", "info", 30, 1),
                   ("fault", "nemesis", None, "info", 100, 0, fault_text("heal", 0, "pause", "s0")),
                   ("get", "c0", "p0:1", "ok", 5, 1), ("get", "c0", "p0:2", "ok", 300, 50),
                   ("get", "c1", "p0:2", "ok", 400, 1), ("put", "p0", "p0:4", "ok", 500, 1))
    recovery = time_to_recover(rec.table())
    assert recovery.heal_ns == 100 * MS and recovery.seconds == pytest.approx(0.25)  # p0:2's first delivery at 350
    assert recovery.within(0.3) and not recovery.within(0.2) and recovery.within(None) is None


def test_a_message_acknowledged_before_the_heal_and_never_delivered_is_no_recovery():
    rec = _history(("put", "p0", "p0:1", "ok", 0, 1), ("put", "p0", "p0:2", "ok", 10, 1),
                   ("fault", "nemesis", None, "info", 20, 0, fault_text("start", 0, "crash", "s0")),
                   ("fault", "nemesis", None, "info", 40, 0, fault_text("heal", 0, "crash", "s0")),
                   ("get", "c0", "p0:1", "ok", 50, 1))
    recovery = time_to_recover(rec.table())
    assert recovery.seconds is None and recovery.undelivered == 1 and recovery.within(10) is False


def test_a_run_without_a_heal_has_no_recovery_to_measure():
    recovery = time_to_recover(_history(("put", "p0", "p0:1", "ok", 0, 1), ("get", "c0", "p0:1", "ok", 5, 1)).table())
    assert (recovery.heal_ns, recovery.seconds) == (None, None) and recovery.within(1.0) is None


def test_a_small_matrix_is_one_table_of_cells_over_seeds(tmp_path):
    matrix = run_matrix(["ideal", "kestrel"], ["crash"], seeds=2, overrides={"kestrel": [{"syncJournal": "always"}]},
                        jobs=2, out=tmp_path / "m", progress=False, echo=lambda _: None)
    rows = {(r["backend"], r["options"]): r for r in matrix.rows}
    assert set(rows) == {("ideal", ""), ("kestrel", "syncJournal=always")}
    ideal, kestrel = rows[("ideal", "")], rows[("kestrel", "syncJournal=always")]
    assert ideal["seeds"] == kestrel["seeds"] == 2
    # in memory, a crash loses what was queued: allowed, never recovered; a synced journal loses nothing
    assert ideal["verdict"] == Verdict.ALLOWED and ideal["lost"] > 0 and "crash" in ideal["reason"]
    assert ideal["recover_s"] is None and ideal["undelivered"] > 0
    assert kestrel["verdict"] == Verdict.VALID and kestrel["lost"] == 0 and kestrel["recover_s"] is not None
    for row in (ideal, kestrel):  # per-phase latency, from the Spark pipeline's merged histograms
        assert row["put_steady_p50_ns"] > 0 and row["put_steady_p999_ns"] >= row["put_steady_p50_ns"]
        assert row["e2e_heal_p99_ns"] > 0
        assert len(row["run_ids"].split()) == 2
    # fsync on every put shows in its latency
    assert kestrel["put_steady_p50_ns"] > ideal["put_steady_p50_ns"]
    with matrix.csv_path.open() as f:
        assert len(list(csv.DictReader(f))) == 2
    text = matrix.markdown_path.read_text()
    assert "| ideal | allowed" in text and "| kestrel syncJournal=always | valid 0/" in text
    assert matrix.heatmap_path.stat().st_size > 10_000


@pytest.mark.parametrize("sets, words", [
    ("kestrel: [{syncJournal: sometimes}]", "syncJournal"),
    ("nosuch: [{}]", "not among the designs run"),
    ("kestrel: {syncJournal: always}", "use {design: [{option: value"),
])
def test_bad_option_sets_fail_before_any_run(tmp_path, capsys, sets, words):
    path = tmp_path / "sets.yaml"
    path.write_text(sets + "\n")
    out = tmp_path / "m"
    assert main(["matrix", "--backends", "kestrel", "--scenarios", "crash", "--option-sets", str(path),
                 "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("argv, words", [
    (["--seeds", "0"], "--seeds 0"), (["--jobs", "0"], "--jobs 0"), (["--backends", "nosuch"], "unknown backend"),
    (["--scenarios", "nosuch"], "no such workload"),
])
def test_bad_matrix_arguments_are_one_line_errors(tmp_path, capsys, argv, words):
    assert main(["matrix", *argv, "--out", str(tmp_path / "m"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "m").exists()


def test_lab_matrix_exits_1_when_a_cell_is_invalid_and_0_when_every_cell_is_valid_or_allowed(tmp_path, capsys):
    """A script or CI gates on the exit status. Queuefka with the mutant
    ``queuefka-ack-before-fsync`` planted (for this matrix only; its workers are forked, so
    they run it too) loses an acknowledged put under seed 1's crash: its cell is INVALID. The
    ideal queue loses its backlog under the same crash, as its promises allow: ALLOWED does
    not fail the matrix."""
    sets = tmp_path / "sets.yaml"
    sets.write_text("queuefka: [{fsync: always}]\nideal: [{}]\n")
    common = ["matrix", "--scenarios", "ack-before-durable-crash", "--seeds", "1", "--jobs", "2", "--no-progress"]
    with plant("queuefka-ack-before-fsync"):
        assert main([*common, "--backends", "ideal,queuefka", "--option-sets", str(sets),
                     "--out", str(tmp_path / "m1")]) == 1
    out = capsys.readouterr().out
    invalid = [line for line in out.splitlines() if line.startswith("INVALID: ")]
    assert len(invalid) == 1 and invalid[0].startswith("INVALID: queuefka fsync=always under ack-before-durable-crash: "
                                                      "lost "), out
    assert "acknowledged message" in invalid[0]
    assert main([*common, "--backends", "ideal", "--out", str(tmp_path / "m2")]) == 0
    out = capsys.readouterr().out
    assert "| ideal | allowed" in out and "INVALID" not in out
