"""`lab compare`: one number, one meaning across the run summary, the table and the chart;
combinations that cannot run are named, and a comparison with none fails before it starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import lab.aggregate.spark
from lab.cli import main
from lab.experiments.compare import compare
from lab.judge.summary import format_ns
from lab.present.plots import latency_figure
from lab.workloads.spec import parse_workload

# A closed-loop burst with a pause: queuefka's consumers fall behind, so the end-to-end
# latency of the measured phases differs from the whole run's (the drain empties a backlog).
BURST = {"name": "burst", "queues": 1, "producers": 2, "consumers": 2, "message_size": 100, "rate": 0,
         "duration": 0.4, "warmup": 0.1, "ack": "reliable", "seed": 2,
         "faults": [{"fault": "disk-delay", "at": 0.2, "duration": 0.05, "ms": 50, "target": "clients"}]}
GC_PAUSE = Path(__file__).resolve().parents[1] / "lab" / "workloads" / "gc-pause.yaml"
# What Spark and its JVM print on start-up, whatever the log level (Spark 3.x and 4.x).
START_UP_LINES = ("Setting default log level", "To adjust logging level", "Using incubator modules",
                  "Using Spark's default log4j profile", "NativeCodeLoader")


def test_nothing_to_run_fails_before_anything_starts(tmp_path, capsys):
    session = lab.aggregate.spark._session
    out = tmp_path / "cmp"
    code = main(["compare", "--worlds", "live", "--workloads", str(GC_PAUSE), "--backends", "ideal",
                 "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("lab: error: nothing to run: ")
    assert ("gc-pause on ideal in the live world: the live world applies faults to server processes, "
            "and ideal has none (it runs in the runner's process)") in err
    assert "Traceback" not in err
    assert not out.exists() and lab.aggregate.spark._session is session  # no run, no folder, no (new) Spark


@pytest.fixture(scope="module")
def comparison(spark, tmp_path_factory):
    lines: list[str] = []
    result = compare(["queuefka"], ["sim", "live"], [parse_workload(BURST)], out=tmp_path_factory.mktemp("cmp"),
                     progress=False, echo=lines.append)
    return result, lines


def test_table_chart_and_run_summary_give_one_end_to_end_p50(comparison):
    result, _ = comparison
    [row] = result.rows
    table_p50 = row["e2e_p50_ns"]
    ax = next(a for a in latency_figure(result.panels).axes if "end to end" in a.get_title())
    assert "measured phases" in ax.get_title()
    unit = ax.yaxis.get_major_formatter()(1.0, 0).split()[1]  # the tick at 1: "1 ms" or "1 s"
    scale = {"ms": 1e6, "s": 1e9}[unit]
    [line] = [line for line in ax.get_lines() if line.get_label() == "queuefka (sim)"]
    chart_p50 = line.get_ydata()[0] * scale  # the first point is p50
    manifest = json.loads((result.directory / "burst-queuefka-sim" / "manifest.json").read_text())
    run_p50 = manifest["summary"]["measured"]["e2e"]["p50_ns"]
    assert chart_p50 == pytest.approx(table_p50, rel=0.01)
    assert run_p50 == pytest.approx(table_p50, rel=0.01)
    # The whole run's figure is another number, and the run summary keeps it apart.
    assert manifest["summary"]["e2e"]["p50_ns"] != pytest.approx(table_p50, rel=0.05)
    text = result.markdown_path.read_text()
    assert "measured phases (steady, fault, heal" in text and "| burst | queuefka | sim |" in text
    # The answer in words beside the table: the same put p50 as the table prints, and the world that did not run.
    answer = result.answer_path.read_text()
    assert row["verdict"] == "valid" and answer.startswith(
        "No design lost or duplicated an acknowledged message in the one run, and its verdict is valid.")
    assert f"The fastest put in the sim world: in burst, queuefka at p50 ({format_ns(row['put_p50_ns'])})" in answer
    assert answer.strip().endswith("Nothing ran in the live world.")


def test_combinations_that_cannot_run_are_named_one_line_each(comparison):
    _, lines = comparison
    skipped = [line for line in lines if "skipped" in line]
    assert skipped == ["  skipped burst on queuefka in the live world: the live world cannot apply faults[0] "
                       "(disk-delay): target clients may hit a client, and clients run in the runner's own "
                       "process: the live world pauses, crashes and slows the disks of server processes only "
                       "(target servers, server or a server's name)"]


def test_spark_starts_without_its_start_up_lines_and_errors_still_show():
    code = ("from lab.aggregate.spark import spark_session\n"
            "s = spark_session('local[1]')\n"
            "assert s.range(3).count() == 3\n"
            "s.sparkContext._jvm.org.apache.logging.log4j.LogManager.getLogger('queue-lab').error('a real error')\n"
            "s.stop()\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    assert "ERROR queue-lab: a real error" in out.stderr  # the JVM's stderr still shows
    shown = out.stdout + out.stderr
    assert [line for line in START_UP_LINES if line in shown] == []
