"""The `lab` command as a user runs it: real processes, exit codes, one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from lab.design.registry import CONTROL, usable

SMALL = "name: small\nproducers: 2\nconsumers: 1\nrate: 1000\nduration: 0.5\nseed: 3\n"


def lab(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=900)  # a guard against a hang: on a busy machine compare takes minutes


@pytest.fixture
def small(tmp_path) -> Path:
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def test_backends_lists_the_ideal_control():
    out = lab("backends")
    assert out.returncode == 0 and out.stdout.startswith("ideal:") and "worlds: sim, live" in out.stdout


@pytest.mark.parametrize("args, message", [
    (["run", "missing.yaml", "--backend", "ideal"], "no such workload file"),
    (["run", "{small}", "--backend", "kafka"], "unknown backend 'kafka'"),
    (["compare", "--worlds", "mars"], "--worlds takes sim and/or live"),
    (["compare", "--backends", "nope", "--workloads", "{small}"], "unknown backend 'nope'"),
])
def test_user_mistakes_print_one_line_and_exit_2(args, message, small):
    out = lab(*[a.replace("{small}", str(small)) for a in args])
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("lab: error:")
    assert message in out.stderr and "Traceback" not in out.stderr


def test_a_bad_field_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nrate: fast\nduration: 1\n")
    out = lab("run", str(bad), "--backend", "ideal")
    assert out.returncode == 2 and "field 'rate'" in out.stderr and "Traceback" not in out.stderr


def test_a_bad_seed_is_refused_by_the_parser(small):
    out = lab("run", str(small), "--backend", "ideal", "--seed", "abc")
    assert out.returncode == 2 and "must be a whole number" in out.stderr


def test_run_prints_a_summary_and_writes_the_run(small, tmp_path):
    out = lab("run", str(small), "--backend", "ideal", "--world", "sim", "--seed", "9", "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    assert "small on ideal, sim world, seed 9" in out.stdout
    assert "checker: VALID: 500 attempted, 500 ok, 0 lost" in out.stdout
    assert (tmp_path / "r" / "samples.parquet").exists() and (tmp_path / "r" / "manifest.json").exists()


def test_compare_writes_the_table_and_the_chart(small, tmp_path):
    out = lab("compare", "--workloads", str(small), "--out", str(tmp_path / "cmp"), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "| small | ideal | sim |" in out.stdout and "| small | ideal | live |" in out.stdout
    rows = list(csv.DictReader((tmp_path / "cmp" / "compare.csv").open()))
    assert (tmp_path / "cmp" / "summary" / "summary.parquet").exists()
    # Every design (not the real brokers: live only, asked for by name) runs in both worlds, and
    # each run must check valid.
    expected = [(name, world, "valid") for name in sorted(usable()) for world in ("sim", "live")]
    assert sorted((r["backend"], r["world"], r["verdict"]) for r in rows) == sorted(expected)
    png = (tmp_path / "cmp" / "latency.png").read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    # The answer in words comes last, as answer.md has it, and agrees with the table printed above it.
    table, answer = out.stdout.split("\nThe answer:\n")
    assert answer.strip() == (tmp_path / "cmp" / "answer.md").read_text().strip()
    assert answer.startswith(f"No design lost or duplicated an acknowledged message in any of the {len(rows)} runs, "
                             "and every verdict is valid.")
    printed = {(cells[2], cells[3]): cells[6] for line in table.splitlines() if line.startswith("| small |")
               for cells in [[c.strip() for c in line.split("|")]]}  # (design, world) -> put p50 as printed
    for world in ("sim", "live"):
        timed = {r["backend"]: float(r["put_p50_ns"]) for r in rows if r["world"] == world and r["backend"] != CONTROL}
        best = printed[(min(timed, key=timed.get), world)]
        names = [name for name in timed if printed[(name, world)] == best]  # a tie as printed names them all
        said = answer.split(f"The fastest put in the {world} world")[1].split(". The fastest put")[0]
        assert f"in small, {_and(names)} at p50 ({best}" in said, (world, printed, said)


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def test_aggregate_summarises_runs_with_spark(small, tmp_path):
    run_dir = tmp_path / "r"
    assert lab("run", str(small), "--backend", "ideal", "--out", str(run_dir)).returncode == 0
    out = lab("aggregate", str(run_dir), "--out", str(tmp_path / "agg"), "--conf", "spark.sql.shuffle.partitions=2")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "VALID: 500 attempted, 500 ok, 0 lost" in out.stdout
    assert {p.name for p in (tmp_path / "agg").iterdir()} >= {"summary.parquet", "summary.json", "checks.json",
                                                              "throughput.parquet", "histograms.parquet"}


@pytest.mark.parametrize("args, message", [
    (["aggregate", "/nonexistent/run"], "no samples in /nonexistent/run"),
    (["aggregate", "{run}", "--conf", "nokey"], "--conf takes KEY=VALUE"),
    (["aggregate", "{torn}"], "samples.parquet: not a readable Parquet file"),
    (["bench", "aggregate", "--rows", "10"], "--rows must be at least 1000"),
    (["bench", "aggregate", "--cluster", "--master", "local[1]"], "--cluster starts its own master"),
    (["bench", "kestrel", "--queues", "0"], "--queues must be >= 1"),
])
def test_aggregate_and_bench_mistakes_are_one_line(args, message, tmp_path, small):
    run_dir = tmp_path / "r"
    if "{run}" in args or "{torn}" in args:
        assert lab("run", str(small), "--backend", "ideal", "--out", str(run_dir)).returncode == 0
    if "{torn}" in args:  # a torn write: the file's end, with its footer, is gone
        samples = run_dir / "samples.parquet"
        samples.write_bytes(samples.read_bytes()[:-100])
    out = lab(*[a.replace("{run}", str(run_dir)).replace("{torn}", str(run_dir)) for a in args])
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_backend_options_reach_the_design_and_bad_ones_are_refused(small, tmp_path):
    out = lab("run", str(small), "--backend", "queuefka", "--option", "fsync=always", "--no-progress",
              "--out", str(tmp_path / "r"))
    assert out.returncode == 0, out.stderr
    never = lab("run", str(small), "--backend", "queuefka", "--no-progress", "--out", str(tmp_path / "n"))
    # every put waits for its fsync: the put median is above the default's (no fsync at all)
    assert never.returncode == 0, never.stderr
    assert _put_p50(tmp_path / "r") > 2 * _put_p50(tmp_path / "n")
    unknown = lab("run", str(small), "--backend", "queuefka", "--option", "fsnc=always")
    assert unknown.returncode == 2 and "has no option 'fsnc'" in unknown.stderr
    bad_value = lab("run", str(small), "--backend", "queuefka", "--option", "fsync=sometimes")
    assert bad_value.returncode == 2 and "option fsync='sometimes': must be never, always" in bad_value.stderr
    no_value = lab("run", str(small), "--backend", "queuefka", "--option", "fsync")
    assert no_value.returncode == 2 and "use KEY=VALUE" in no_value.stderr


def _put_p50(run_dir: Path) -> float:
    """The put median the run's manifest keeps (what `lab run` prints), in nanoseconds."""
    return json.loads((run_dir / "manifest.json").read_text())["summary"]["put"]["p50_ns"]
