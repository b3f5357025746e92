"""`lab explain` and the report's timeline, on a real short sim run: kestrel with
syncJournal=never under the crash workload, which loses its unsynced tail (allowed)."""

from __future__ import annotations

import re

import pytest

from lab.cli import main


@pytest.fixture(scope="module")
def crashed(tmp_path_factory):
    out = tmp_path_factory.mktemp("explain") / "run"
    assert main(["run", "crash", "--backend", "kestrel", "--option", "syncJournal=never", "--no-progress",
                 "--out", str(out)]) == 0
    return out


def test_explain_lists_a_lost_message_then_tells_its_story(crashed, capsys):
    capsys.readouterr()
    assert main(["explain", str(crashed)]) == 0
    listing = capsys.readouterr().out
    lost = re.search(r"^(p\d+:\d+)\s+lost: under crash", listing, re.M)
    assert lost, listing[:500]
    assert main(["explain", str(crashed), lost.group(1)]) == 0
    said = capsys.readouterr().out
    assert re.search(r"put\s+ok\s+client p\d", said)
    assert "held by: kestrel" in said
    assert re.search(r"crash from .*struck kestrel \(its holder\)", said)
    assert "verdict: lost under crash: allowed, syncJournal=never" in said


def test_not_a_run_and_an_unknown_message_are_one_line_and_exit_2(crashed, tmp_path, capsys):
    capsys.readouterr()
    assert main(["explain", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "not a run's folder" in err
    assert main(["explain", str(crashed), "nobody:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "no such message" in err


def test_the_report_writes_a_timeline_with_the_clients_and_the_fault_band(crashed, tmp_path):
    assert main(["report", str(crashed), "--out", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report-timelines" / crashed.name / "timeline.html").read_text()
    for client in ("p0", "p1", "c0"):
        assert f">{client}</text>" in page
    assert 'class="fault"' in page and "crash on kestrel" in page
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched
