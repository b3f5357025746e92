"""The sim world's CPU model (``models.cpu``): requests queue for a node's cores and hold one
for their kind's service time; pauses stop the cores; the calibration file and the ideal
design's ``service`` option choose the service times."""

from __future__ import annotations

import dataclasses

import pyarrow.compute as pc
import pytest

from lab.design.options import BadOption
from lab.history.record import read_samples
from lab.experiments.run_spec import RunSpec
from lab.experiments.runner import run
from lab.design.service import ServiceModel, ServiceModelError, ServiceTime
from lab.workloads.errors import WorkloadError
from lab.workloads.spec import parse_workload

NO_NETWORK = {"dist": "constant", "ms": 0}


def _workload(tmp_path, calibration: dict | None = None, **fields):
    sim = {"latency": NO_NETWORK, **fields.pop("sim", {})}
    if calibration is not None:
        path = tmp_path / "calibration.yaml"
        import yaml

        path.write_text(yaml.safe_dump(calibration))
        sim["calibration"] = str(path)
    data = {"name": "cpu", "producers": 1, "consumers": 1, "messages": 200, "rate": 0, "seed": 3, "sim": sim, **fields}
    return parse_workload(data, "<test>")


def _latencies_ns(result, op: str) -> list[int]:
    table = read_samples(result.samples_path)
    rows = table.filter(pc.and_(pc.equal(table["op"], op), pc.equal(table["outcome"], "ok")))
    return rows["latency_ns"].to_pylist()


def _run(workload, tmp_path, name="run", **kw):
    return run(workload, kw.pop("backend", "ideal"), "sim", out=tmp_path / name, progress=False, **kw)


def test_a_put_holds_the_core_for_its_service_time(tmp_path):
    workload = _workload(tmp_path, {"cores": 1, "services": {"Put": {"dist": "const", "us": 1000}}})
    result = _run(workload, tmp_path)
    puts = _latencies_ns(result, "put")
    assert len(puts) == 200 and set(puts) == {1_000_000}  # no network time, one producer: no queue


def test_two_producers_queue_for_one_core_and_not_for_two(tmp_path):
    calibration = {"cores": 1, "services": {"Put": {"dist": "const", "us": 1000}}}
    one = _run(_workload(tmp_path, calibration, producers=2), tmp_path, "one")
    two = _run(_workload(tmp_path, calibration, producers=2, sim={"cores": 2}), tmp_path, "two")
    assert sorted(set(_latencies_ns(one, "put"))) == [1_000_000, 2_000_000]  # the first put waits for none
    assert set(_latencies_ns(two, "put")) == {1_000_000}
    # throughput: 200 puts take twice as long on one core
    assert one.world_seconds > 1.8 * two.world_seconds - 0.2


def test_the_ideal_design_takes_its_service_time_as_an_option(tmp_path):
    workload = _workload(tmp_path)
    result = _run(workload, tmp_path, options={"service": "const:250us"})
    # every request costs 250 µs, so a put finds the core free or behind one get
    assert set(_latencies_ns(result, "put")) == {250_000, 500_000}
    assert min(_latencies_ns(result, "get")) >= 250_000


def test_a_pause_stops_the_cores(tmp_path):
    calibration = {"cores": 1, "services": {"Put": {"dist": "const", "us": 1000}}}
    workload = _workload(tmp_path, calibration, messages=None, duration=1.0, rate=500,
                         faults=[{"at": 0.5, "fault": "pause", "target": "servers", "duration": 0.2}])
    puts = _latencies_ns(_run(workload, tmp_path), "put")
    assert max(puts) >= 190_000_000  # a put that arrived in the pause waited it out
    assert min(puts) == 1_000_000


def test_no_calibration_means_no_cpu_time(tmp_path):
    calibration = {"cores": 1, "services": {"Put": {"dist": "const", "us": 1000}}}
    workload = _workload(tmp_path, calibration)
    plain = dataclasses.replace(workload, sim={**workload.sim, "calibration": "none"})
    assert set(_latencies_ns(_run(plain, tmp_path), "put")) == {0}


def test_kestrel_requests_are_charged_by_their_memcache_command(tmp_path):
    calibration = {"cores": 1, "services": {"set": {"dist": "const", "us": 700}, "get/open": {"dist": "const", "us": 0},
                                            "get/close/open": {"dist": "const", "us": 0}}}
    workload = _workload(tmp_path, calibration, ack="reliable")
    result = _run(workload, tmp_path, backend="kestrel")
    assert set(_latencies_ns(result, "put")) == {700_000}


def test_same_seed_same_service_times(tmp_path):
    workload = _workload(tmp_path, producers=3)
    a = _latencies_ns(_run(workload, tmp_path, "a", options={"service": "exp:100us"}), "put")
    b = _latencies_ns(_run(workload, tmp_path, "b", options={"service": "exp:100us"}), "put")
    c = _latencies_ns(run(workload, "ideal", "sim", seed=4, out=tmp_path / "c", progress=False,
                          options={"service": "exp:100us"}), "put")
    assert a == b and a != c


@pytest.mark.parametrize("spec, expected", [
    ("const:50us", ServiceTime("const", 50_000)),
    ("exp:1.5ms", ServiceTime("exp", 1_500_000)),
    ("lognormal:50us:0.5", ServiceTime("lognormal", 50_000, 0.5)),
])
def test_service_specs_parse(spec, expected):
    assert ServiceTime.parse(spec) == expected


@pytest.mark.parametrize("spec", ["exp", "exp:50", "gamma:50us", "lognormal:50us", "lognormal:50us:x", "const:-5us"])
def test_bad_service_specs_say_what_to_write(spec):
    with pytest.raises(ServiceModelError, match="service|duration|sigma"):
        ServiceTime.parse(spec)
    with pytest.raises(BadOption, match="const:50us, exp:50us"):
        run(_workload_no_file(), "ideal", "sim", progress=False, options={"service": spec})


def _workload_no_file():
    return parse_workload({"name": "x", "messages": 1}, "<test>")


@pytest.mark.parametrize("text, error", [
    ("services: [1, 2]", "maps request kinds"),
    ("services: {set: {dist: const}}", "needs dist and us"),
    ("services: {set: {dist: const, us: 5, speed: 2}}", "unknown field"),
    ("cores: 0", "cores must be"),
    ("bogus: 1", "unknown field"),
    ("services: {set: {dist: gamma, us: 5}}", "service dist"),
])
def test_bad_calibration_files_are_refused_by_name(tmp_path, text, error):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ServiceModelError, match=error):
        ServiceModel.load(path)
    # a workload naming it parses (the file is read once, by the run's spec), and its run is
    # refused by name before anything runs or is written
    workload = parse_workload({"name": "x", "messages": 1, "sim": {"calibration": str(path)}}, "<test>")
    with pytest.raises(WorkloadError, match=error):
        RunSpec.resolve(workload, "kestrel")
    with pytest.raises(WorkloadError, match=error):
        run(workload, "kestrel", "sim", out=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_a_calibration_file_round_trips(tmp_path):
    model = ServiceModel({"set": ServiceTime("lognormal", 20_000, 0.3, 0.5)}, ServiceTime("exp", 5_000), cores=2,
                         network={"dist": "lognormal", "ms": 0.02, "sigma": 0.3}, measured={"date": "2026-11-25"})
    model.dump(tmp_path / "c.yaml", "kestrel", "# a header\n")
    back = ServiceModel.load(tmp_path / "c.yaml")
    assert back.kinds == model.kinds and back.default == model.default and back.cores == 2
    assert back.network == model.network and back.measured == {"date": "2026-11-25"}


def test_calibrated_latency_needs_a_calibration_with_a_network(tmp_path):
    workload = _workload(tmp_path, {"cores": 1, "services": {}}, sim={"latency": "calibrated"})
    with pytest.raises(ValueError, match="network latency"):
        _run(workload, tmp_path)
    with_net = _workload(tmp_path, {"cores": 1, "services": {}, "network": {"dist": "constant", "ms": 0.05}},
                         sim={"latency": "calibrated"})
    assert set(_latencies_ns(_run(with_net, tmp_path, "net"), "put")) == {100_000}


def test_every_frame_a_server_receives_costs_the_transport(tmp_path):
    calibration = {"cores": 1, "services": {}, "transport_us": 100}
    ideal = _run(_workload(tmp_path, calibration, consumers=0), tmp_path, "ideal")  # messages
    assert set(_latencies_ns(ideal, "put")) == {100_000}
    kestrel = _run(_workload(tmp_path, calibration, consumers=0), tmp_path, "kestrel", backend="kestrel")  # chunks
    assert set(_latencies_ns(kestrel, "put")) == {100_000}


def test_with_calibrated_latency_the_clients_share_the_load_generators_cpu(tmp_path):
    calibration = {"cores": 1, "services": {}, "client": {"dist": "const", "us": 50},
                   "network": {"dist": "constant", "ms": 0}}
    one = _run(_workload(tmp_path, calibration, consumers=0, sim={"latency": "calibrated"}), tmp_path, "one")
    assert set(_latencies_ns(one, "put")) == {50_000}
    two = _run(_workload(tmp_path, calibration, producers=2, consumers=0, sim={"latency": "calibrated"}),
               tmp_path, "two")
    assert sorted(set(_latencies_ns(two, "put"))) == [50_000, 100_000]  # one core for every client
    plain = _run(_workload(tmp_path, calibration, producers=2, consumers=0), tmp_path, "plain")
    assert set(_latencies_ns(plain, "put")) == {0}  # a datacenter's clients are machines of their own


@pytest.mark.parametrize("cpus, per_put_us", [(1, 150), (2, 100)])
def test_with_calibrated_latency_every_process_shares_the_machines_cores(tmp_path, cpus, per_put_us):
    """A put costs the server 100 µs and the load generator 50 µs: on one core they take
    turns (150 µs a put), on two they overlap and the server is the bottleneck (100 µs)."""
    calibration = {"cores": 1, "services": {"Put": {"dist": "const", "us": 100}}, "client": {"dist": "const", "us": 50},
                   "network": {"dist": "constant", "ms": 0}, "measured": {"machine": {"cpus": cpus}}}
    result = _run(_workload(tmp_path, calibration, producers=4, consumers=0, messages=2000,
                            sim={"latency": "calibrated"}), tmp_path)
    table = read_samples(result.samples_path)
    puts = table.filter(pc.equal(table["op"], "put"))
    starts, ends = puts["t_start_ns"].to_numpy(), puts["t_start_ns"].to_numpy() + puts["latency_ns"].to_numpy()
    per_put_ns = (ends.max() - starts.min()) / puts.num_rows
    assert per_put_ns == pytest.approx(per_put_us * 1000, rel=0.02)


def test_with_calibrated_latency_the_disk_takes_the_machines_fsync(tmp_path):
    calibration = {"cores": 1, "services": {}, "network": {"dist": "constant", "ms": 0},
                   "fsync": {"dist": "constant", "ms": 5}}
    workload = _workload(tmp_path, calibration, consumers=0, messages=20, sim={"latency": "calibrated"})
    synced = _run(workload, tmp_path, "synced", backend="kestrel", options={"syncJournal": "always"})
    assert min(_latencies_ns(synced, "put")) >= 5_000_000
    own = _workload(tmp_path, calibration, consumers=0, messages=20,
                    sim={"latency": "calibrated", "fsync": {"dist": "constant", "ms": 2}})
    given = _run(own, tmp_path, "given", backend="kestrel", options={"syncJournal": "always"})
    assert 2_000_000 <= min(_latencies_ns(given, "put")) < 5_000_000  # the workload's own fsync wins
