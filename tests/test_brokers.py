"""`lab brokers` without running a broker: the table's shape from matrix rows, the answer in
words written from the figures (not by hand), and the refusals before any run."""

from __future__ import annotations

import pytest

from lab.cli import main
from lab.experiments.brokers import answer, grid, markdown, table
from lab.experiments.matrix import plan, scenarios_named
from lab.workloads.errors import WorkloadError


def _row(backend: str, options: str, scenario: str, verdict: str, lost: int, duplicated: int = 0,
         put_p50: float | None = 1e6, put_p99: float | None = 5e6, reason: str = "") -> dict:
    row = {"backend": backend, "options": options, "scenario": scenario, "verdict": verdict, "lost": lost,
           "duplicated": duplicated, "inversions": 0, "reason": reason}
    for op in ("put", "e2e"):
        row[f"{op}_steady_p50_ns"], row[f"{op}_steady_p99_ns"], row[f"{op}_steady_p999_ns"] = put_p50, put_p99, put_p99
    return row


def test_the_answer_is_written_from_the_figures():
    rows = [_row("redis", "appendfsync=no", "crash", "allowed", 120, reason="appendfsync=no ..."),
            _row("redis", "appendfsync=always", "crash", "valid", 0),
            _row("beanstalkd", "fsync=never", "kill", "valid", 0, duplicated=2),
            _row("redis", "appendfsync=always", "steady", "valid", 0, put_p50=2e6, put_p99=9e6),
            _row("kestrel", "syncJournal=never", "steady", "valid", 0, put_p50=4e5, put_p99=3e6)]
    lines = table(rows)
    assert [line["kind"] for line in lines] == ["broker", "broker", "broker", "broker", "design"]
    words = answer(lines)
    assert ("brokers that lost acknowledged messages were redis appendfsync=no — each as its own setting allows; "
            "redis appendfsync=always lost none") in words
    assert "A kill -9 (the page cache kept) lost nothing on any broker; beanstalkd fsync=never delivered some twice." in words
    assert "fastest put at p50 was kestrel syncJournal=never (400 µs)" in words
    assert "INVALID" not in words
    lines[0]["verdict"], lines[0]["reason"] = "invalid", "a promise broken"
    assert answer(lines).startswith("Broken promises (INVALID): redis appendfsync=no under crash (a promise broken).")
    assert markdown(lines).count("\n") == len(lines) + 1  # a header, a rule, a line per row
    assert "| redis appendfsync=always | valid 0/0 | - | valid 0/0 | 2 ms / 9 ms | 2 ms / 9 ms |" in grid(lines)


def test_a_broker_is_refused_in_the_sim_world_before_any_run():
    with pytest.raises(WorkloadError, match="redis runs in the live world only"):
        plan(["redis"], scenarios_named(["steady"]), {"redis": [{}]}, "sim")


def test_lab_brokers_refuses_a_design_named_as_a_broker(capsys):
    assert main(["brokers", "--brokers", "kestrel", "--no-progress"]) == 2
    assert "--brokers kestrel: not a real broker" in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["conform", "redis", "--quick"], "redis is a real broker, not a design"),
    (["run", "steady", "--backend", "redis"], "runs in the live world(s), not 'sim' (--world live)"),
    (["swarm", "--backend", "redis", "--seeds", "1..2"], "does not run in the sim world (it runs in: live)"),
])
def test_a_broker_asked_for_a_sim_world_command_is_one_line(argv, says, capsys):
    assert main(argv) == 2
    assert says in capsys.readouterr().err
