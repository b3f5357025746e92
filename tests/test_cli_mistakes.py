"""User mistakes end in one line on stderr, exit 2, no traceback and nothing written; and
the newcomer's aids (standard workloads by name, `lab workloads`, `--version`, the legend).

Run in-process through ``lab.cli.main``: an unexpected exception fails the test with its
traceback, which is the bug these tests look for.
"""

from __future__ import annotations

import pytest

from lab.cli import main
from lab.workloads.spec import standard_workload_files

SMALL = "name: small\nproducers: 1\nconsumers: 1\nrate: 500\nduration: 0.4\nseed: 3\n"


pytestmark = pytest.mark.usefixtures("results")  # runs go to the test's own folder (conftest)


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return path


def refused(capsys, *args: str) -> str:
    """Run `lab ARGS`; assert exit 2 and one `lab: error:` line; return that line."""
    assert main([str(a) for a in args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lab: error: ") and "\n" not in err, err
    return err


def wrote_no_run(results) -> bool:
    runs = results / "runs"
    return not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("backend, option, allowed", [
    ("ideal", "timeout=-1", "a number of seconds > 0"),
    ("kestrel", "timeout=-1", "a number of seconds > 0"),
    ("queuefka", "timeout=-1", "a number of seconds > 0"),
    ("ideal", "timeout=abc", "a number of seconds > 0"),
    ("queuefka", "prefetch=0", "a whole number >= 1"),
    ("queuefka", "prefetch=-5", "a whole number >= 1"),
    ("queuefka", "fsync=sometimes", "never, always, <N>ms or <N>records"),
    ("queuefka", "retention_age=-1", "a number of seconds > 0"),
    ("kestrel", "syncJournal=abc", "never, always, or a period"),
    ("kestrel", "maxOpenTransactions=0", "a whole number >= 1"),
    ("kestrel", "maxItems=1.5", "a whole number >= 1"),
    ("cassieq", "store=mongodb://x", "cassandra (the simulated Cassandra: sim world), sqlite"),
    ("cassieq", "cassandra_ghost_write_p=2", "a probability from 0 to 1"),
    ("cassieq", "api_nodes=0", "a whole number >= 1"),
    ("primer", "replication=gossip", "sync (all at once) or chain"),
    ("primer", "persistence=always", "off (memory only) or aof"),
    ("primer", "nodes=0", "a whole number >= 1"),
    ("primer", "replicas=4", "must be at most nodes=3"),
])
def test_a_bad_option_is_a_usage_error_not_a_verdict(capsys, results, small, backend, option, allowed):
    key = option.partition("=")[0]
    err = refused(capsys, "run", small, "--backend", backend, "--option", option)
    assert f"backend {backend!r}: option {key}=" in err and allowed in err
    assert wrote_no_run(results)


@pytest.mark.parametrize("world, option", [
    ("live", "store=cassandra"),  # the simulated Cassandra exists in the sim world only
    ("live", "cassandra_late_write_p=0.5"),
    ("sim", "store=sqlite"),
])
def test_an_option_for_the_other_world_is_a_usage_error(capsys, results, small, world, option):
    err = refused(capsys, "run", small, "--backend", "cassieq", "--world", world, "--option", option)
    other = "sim" if world == "live" else "live"
    assert f"works in the {other} world only, not the {world} world" in err
    assert wrote_no_run(results)


@pytest.mark.parametrize("fault, field", [
    ("{fault: disk-delay, at: 0.1, duration: 0.1, ms: abc}", "faults[0].ms"),
    ("{fault: pause, at: 0.1, duration: 0.1, ms: abc}", "faults[0].ms"),
    ("{fault: loss, at: 0.1, duration: 0.1, p: abc}", "faults[0].p"),
    ("{fault: pause, at: 0.1, duration: 0.1, p: abc}", "faults[0].p"),
    ("{fault: pause, at: 9, duration: 0.1}", "faults[0].at"),
])
def test_bad_fault_fields_are_named(capsys, results, tmp_path, fault, field):
    path = tmp_path / "w.yaml"
    path.write_text(SMALL + f"faults:\n  - {fault}\n")
    assert f"field '{field}'" in refused(capsys, "run", path, "--backend", "ideal")
    assert wrote_no_run(results)


def test_a_binary_file_or_a_directory_is_not_a_workload(capsys, tmp_path):
    binary = tmp_path / "w.yaml"
    binary.write_bytes(b"\x00\xff\xfe" * 100)
    assert "not a text file" in refused(capsys, "run", binary, "--backend", "ideal")
    assert "is a directory" in refused(capsys, "run", tmp_path, "--backend", "ideal")


def test_out_on_an_existing_file_or_run_is_refused(capsys, small, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    assert "exists and is not a folder" in refused(capsys, "run", small, "--backend", "ideal", "--out", taken)
    assert taken.read_text() == "keep me"
    assert main(["run", str(small), "--backend", "ideal", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    capsys.readouterr()
    assert "holds a run already" in refused(capsys, "run", small, "--backend", "ideal", "--out", tmp_path / "r")


def test_a_run_that_fails_leaves_no_folder(capsys, results, tmp_path):
    path = tmp_path / "w.yaml"  # the target is only known to be wrong once the run's nodes exist
    path.write_text(SMALL + "faults:\n  - {fault: pause, at: 0.1, duration: 0.1, target: [nosuch]}\n")
    assert "fault target 'nosuch' is not a node" in refused(capsys, "run", path, "--backend", "ideal")
    assert wrote_no_run(results)


def test_a_fault_that_never_started_is_reported(capsys, tmp_path):
    path = tmp_path / "w.yaml"  # a closed-loop count: the end of the load is known only afterwards
    path.write_text("name: quick\nmessages: 50\nrate: 0\nseed: 1\n"
                    "faults:\n  - {fault: pause, at: 30, duration: 0.1}\n")
    assert main(["run", str(path), "--backend", "ideal", "--no-progress", "--out", str(tmp_path / "r")]) == 0
    err = capsys.readouterr().err
    assert "lab: warning: fault 0 (pause at 30 s) never started: the load ended at" in err


def test_kestrel_dump_of_a_file_that_is_not_a_journal(capsys, tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"hello, this is not a journal\n" * 3)
    assert str(junk) in refused(capsys, "kestrel", "dump", junk)


def test_standard_workloads_are_listed_and_run_by_name(capsys, tmp_path):
    assert main(["workloads"]) == 0
    out = capsys.readouterr().out
    for path in standard_workload_files():
        assert path.stem in out
    assert "a 400 ms stop-the-world pause" in out
    assert main(["run", "steady", "--backend", "ideal", "--no-progress", "--out", str(tmp_path / "r")]) == 0
    assert "steady on ideal, sim world" in capsys.readouterr().out
    assert "nor a standard workload" in refused(capsys, "run", "stedy", "--backend", "ideal")


def test_version_and_the_run_legend(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("lab 0.")
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    help_text = capsys.readouterr().out
    for term in ("e2e", "delay", "info", "its outcome is unknown", "exit status"):
        assert term in help_text
