"""Workload files: a good one loads; every bad field is named with its problem."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from lab.workloads.errors import WorkloadError
from lab.workloads.spec import load_workload, parse_workload, standard_workload_files

GOOD = {"name": "w", "producers": 2, "consumers": 3, "queues": 2, "message_size": 64, "rate": 500,
        "duration": 2, "ack": "reliable", "warmup": 0.5, "seed": 9,
        "faults": [{"fault": "pause", "at": 1, "duration": 0.2, "target": "server"},
                   {"fault": "partition", "at": 0.5, "duration": 0.1, "target": ["p0"], "mode": "one-way-out"}],
        "sim": {"latency": {"dist": "constant", "ms": 0.2}, "loss": 0.01}}


def test_a_good_file_loads(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text("name: w\nproducers: 2\nconsumers: 3\nrate: 500\nduration: 2\nack: reliable\n")
    w = load_workload(path)
    assert (w.name, w.producers, w.consumers, w.queues, w.rate, w.duration, w.messages, w.reliable) == \
        ("w", 2, 3, 1, 500.0, 2.0, None, True)


def test_faults_are_parsed_and_sorted_by_time():
    w = parse_workload(GOOD)
    assert [f.fault for f in w.faults] == ["partition", "pause"]
    assert w.faults[0].target == ("p0",) and w.faults[0].mode == "one-way-out"
    assert w.faults[1].target == ("server",)


@pytest.mark.parametrize("change, field, problem", [
    ({"name": ""}, "name", "non-empty"),
    ({"name": "../x"}, "name", "path separators"),
    ({"producers": 0}, "producers", ">= 1"),
    ({"consumers": "two"}, "consumers", "whole number"),
    ({"queues": 1.5}, "queues", "whole number"),
    ({"message_size": True}, "message_size", "whole number"),
    ({"rate": -1}, "rate", ">= 0"),
    ({"rate": "fast"}, "rate", "a number"),
    ({"messages": 100}, "duration", "exactly one"),
    ({"duration": 0}, "duration", "> 0"),
    ({"ack": "sometimes"}, "ack", "auto, reliable"),
    ({"seed": "x"}, "seed", "whole number"),
    ({"colour": "red"}, "colour", "unknown field"),
    ({"faults": {"fault": "pause"}}, "faults", "list"),
    ({"faults": [{"fault": "meteor", "at": 1, "duration": 1}]}, "faults[0].fault", "one of"),
    ({"faults": [{"fault": "pause", "duration": 1}]}, "faults[0].at", "required"),
    ({"faults": [{"fault": "pause", "at": 1, "duration": 1, "when": 2}]}, "faults[0].when", "unknown field"),
    ({"faults": [{"fault": "partition", "at": 1, "duration": 1, "mode": "sideways"}]}, "faults[0].mode", "one of"),
    ({"faults": [{"fault": "disk-delay", "at": 1, "duration": 1}]}, "faults[0].ms", "ms"),
    ({"faults": [{"fault": "loss", "at": 1, "duration": 1, "p": 2}]}, "faults[0].p", "probability"),
    ({"faults": [{"fault": "pause", "at": 1, "duration": 1, "target": []}]}, "faults[0].target", "node names"),
    ({"faults": [{"fault": "disk-delay", "at": 1, "duration": 1, "ms": "abc"}]}, "faults[0].ms", "got 'abc'"),
    ({"faults": [{"fault": "pause", "at": 1, "duration": 1, "ms": "abc"}]}, "faults[0].ms",
     "unknown field for a pause fault"),
    ({"faults": [{"fault": "loss", "at": 1, "duration": 1, "p": "abc"}]}, "faults[0].p", "got 'abc'"),
    ({"faults": [{"fault": "pause", "at": 1, "duration": 1, "p": "abc"}]}, "faults[0].p",
     "unknown field for a pause fault"),
    ({"faults": [{"fault": "partition", "at": 1, "duration": 1, "shape": "donut"}]}, "faults[0].shape",
     "majorities-ring"),
    ({"faults": [{"fault": "partition", "at": 1, "duration": 1, "shape": "bridge", "mode": "one-way-in"}]},
     "faults[0].mode", "one cut-off side"),
    ({"faults": [{"fault": "partition", "at": 1, "duration": 1, "shape": "clients", "target": "all"}]},
     "faults[0].target", "takes no target"),
    ({"faults": [{"fault": "partition", "at": 1, "duration": 1, "flap": -1}]}, "faults[0].flap", ">= 0"),
    ({"faults": [{"fault": "link-delay", "at": 1, "duration": 1}]}, "faults[0].ms", "'ms' > 0"),
    ({"faults": [{"fault": "link-delay", "at": 1, "duration": 1, "ms": 5, "jitter_ms": "x"}]},
     "faults[0].jitter_ms", "milliseconds"),
    ({"faults": [{"fault": "crash", "at": 1, "duration": 1, "tear": "yes"}]}, "faults[0].tear", "true or false"),
    ({"faults": ["pause"]}, "faults[0]", "a mapping"),
    ({"faults": [{"fault": "pause", "at": 2.5, "duration": 1}]}, "faults[0].at", "past the end of the load (2.5 s)"),
    ({"duration": None, "messages": 1000, "rate": 500,
      "faults": [{"fault": "pause", "at": 3, "duration": 1}]}, "faults[0].at", "past the end of the load (2 s)"),
    ({"description": ["a", "list"]}, "description", "one line"),
    ({"sim": {"latency": {"dist": "gaussian"}}}, "sim", "dist"),
    ({"sim": {"loss": 1.5}}, "sim", "loss"),
    ({"sim": {"gravity": 1}}, "sim.gravity", "unknown field"),
    # a field with a default left empty (YAML's null) is refused, not run as None
    ({"queues": None}, "queues", "whole number >= 1, got None"),
    ({"rate": None}, "rate", "a number, got None"),
    ({"warmup": None}, "warmup", "a number, got None"),
])
def test_each_bad_field_is_named(change, field, problem):
    data = {**GOOD, **change}
    with pytest.raises(WorkloadError) as e:
        parse_workload(data, "bad.yaml")
    assert f"bad.yaml: field '{field}'" in str(e.value) and problem in str(e.value)


def test_each_kind_keeps_its_own_fields_and_old_entries_still_load():
    w = parse_workload({**GOOD, "faults": [
        {"fault": "partition", "at": 0.1, "duration": 1, "shape": "majorities-ring", "target": "all", "flap": 0.2},
        {"fault": "link-delay", "at": 0.2, "duration": 1, "ms": 5, "jitter_ms": 2, "target": ["p0", "c0"]},
        {"fault": "crash", "at": 0.3, "duration": 1, "tear": True},
        {"fault": "disk-delay", "at": 0.4, "duration": 1, "ms": 3},
        {"fault": "loss", "at": 0.5, "duration": 1, "p": 0.5, "target": "clients"},
        {"fault": "partition", "at": 0.6, "duration": 1, "target": "server", "mode": "one-way-in"}]})
    ring, delay, crash, disk, loss, old = w.faults
    assert (ring.fault, ring.shape, ring.target, ring.flap, ring.mode) == \
        ("partition", "majorities-ring", ("all",), 0.2, "isolate")
    assert (delay.ms, delay.jitter_ms, delay.target) == (5.0, 2.0, ("p0", "c0"))
    assert crash.tear and disk.ms == 3.0 and loss.p == 0.5
    assert (old.shape, old.mode, old.target) == ("isolate", "one-way-in", ("server",))
    import dataclasses
    assert dataclasses.asdict(ring)["fault"] == "partition"  # what the manifest shows


def test_a_fault_schedule_of_a_closed_loop_count_is_not_bounded():
    # messages sent as fast as possible: only the run can tell when the load ends
    w = parse_workload({**GOOD, "duration": None, "messages": 10, "rate": 0,
                        "faults": [{"fault": "pause", "at": 60, "duration": 1}]})
    assert w.load_seconds is None and w.faults[0].at == 60


def test_standard_workloads_load_by_name_and_have_descriptions():
    steady = load_workload("steady")
    assert steady.name == "steady" and steady.source.endswith("lab/workloads/steady.yaml")
    assert load_workload("gc-pause.yaml").faults
    for path in standard_workload_files():
        w = load_workload(path)
        assert w.description and "\n" not in w.description, path
    with pytest.raises(WorkloadError, match=r"nor a standard workload \(burst-reliable, crash, gc-pause, net-split, steady"):
        load_workload("stedy")


def test_a_directory_or_a_binary_file_is_not_a_workload(tmp_path):
    with pytest.raises(WorkloadError, match="is a directory"):
        load_workload(tmp_path)
    binary = tmp_path / "w.yaml"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(WorkloadError, match="not a text file"):
        load_workload(binary)


def test_missing_file_and_bad_yaml_and_non_mapping(tmp_path):
    with pytest.raises(WorkloadError, match="no such workload file"):
        load_workload(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(bad)
    bad.write_text("- just\n- a list\n")
    with pytest.raises(WorkloadError, match="mapping"):
        load_workload(bad)


def test_scaled_shortens_durations_message_counts_and_faults_not_the_recovery_budget():
    w = load_workload("gc-pause")
    quick = w.scaled(0.5)
    assert quick.warmup == w.warmup * 0.5
    assert (quick.duration, quick.messages) == ((w.duration * 0.5, None) if w.duration is not None
                                                else (None, max(10, int(w.messages * 0.5))))
    assert [(f.at, f.duration) for f in quick.faults] == [(f.at * 0.5, f.duration * 0.5) for f in w.faults]
    assert quick.faults and quick.recover_within == w.recover_within
    assert w.scaled(1.0) is w
    with pytest.raises(WorkloadError, match="positive"):
        w.scaled(0)


def _doc_scenarios() -> dict[str, dict]:
    page = (Path(__file__).resolve().parents[1] / "docs" / "workloads.md").read_text()
    section = page.split("## Your own scenario", 1)[1].split("\n## ", 1)[0]
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```$", section, re.M | re.S)]
    return {b["name"]: b for b in blocks}


@pytest.mark.parametrize("name, backend", [("split-servers", "primer"), ("crash-n1-then-split", "primer"),
                                           ("crash-one-backlog", "kestrel")])
def test_the_docs_own_scenarios_run_and_hit_what_they_say(tmp_path, name, backend):
    """The page's examples, run as written: a servers-only split leaves the clients' links
    alone, a node named as the target is the one struck, a backlog variant's crash comes
    before the consumers start; each run is judged (a crash of a design that fsyncs nothing
    may lose its tail: allowed, never invalid)."""
    from lab.experiments.runner import run
    from lab.history.record import read_samples

    data = _doc_scenarios()[name]
    result = run(parse_workload(data, f"docs:{name}"), backend, "sim", out=tmp_path / "run", progress=False)
    assert result.verdict in ("valid", "allowed"), result.check.line()
    rows = read_samples(result.run_dir).to_pylist()
    faults = [r for r in rows if r["op"] == "fault" and r["error"].startswith("start")]
    assert len(faults) == len(data["faults"]), faults
    if name == "split-servers":
        (line,) = [f["error"] for f in faults]
        assert "|" in line and not any(c in line for c in ("p0", "c0")), line  # servers only
    elif name == "crash-n1-then-split":
        assert faults[0]["node"] == "n1", faults[0]
    else:
        first = min(r["t_start_ns"] for r in rows)
        assert faults[0]["t_start_ns"] - first < data["consumer_delay"] * 1e9
