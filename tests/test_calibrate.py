"""`lab calibrate`: the in-process harness writes a model the sim world loads, names requests
as the sim world charges them, sees a request path that is slower for real, refuses bad
arguments in one line; and the committed calibrations say where and when they were measured."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from lab.design.registry import backend_class, own
from lab.backends.ideal.core import IdealQueue, Put
from lab.experiments.calibrate import Cycles, calibrate
from lab.experiments.calibrate_fit import SIZES
from lab.cli import main
from lab.design.service import ServiceModel

ROOT = Path(__file__).resolve().parents[1]


def burn_cpu(ns: int) -> None:
    """Spin until this thread has used ``ns`` more nanoseconds of CPU."""
    end = time.thread_time_ns() + ns
    while time.thread_time_ns() < end:
        pass


def test_ideal_calibration_writes_a_file_the_sim_world_loads(tmp_path):
    calibration = calibrate("ideal", 20, progress=False)  # the ideal design's loopback is in-process: quick
    path = tmp_path / "ideal.yaml"
    calibration.write(path)
    text = path.read_text()
    assert text.startswith("# ") and "`lab calibrate ideal`" in text.splitlines()[0]
    model = ServiceModel.load(path)
    assert {"Put", "Get", "Ack"} <= set(model.kinds)
    assert all(st.scale_ns > 0 and st.mean_ns > 0 for st in model.kinds.values())
    assert model.kinds["Put"].dist == "lognormal"  # enough puts for a lognormal
    assert model.network is not None and model.network["dist"] in ("lognormal", "constant") and model.network["ms"] > 0
    measured = model.measured
    assert measured["sizes"] == list(SIZES) and measured["requests_per_kind"]["Put"] == 2 * 2 * 20  # two puts a cycle
    assert measured["machine"]["cpus"] >= 1 and measured["python"] and measured["lab"]


def _sim_kinds(backend: str, cycles: int, monkeypatch) -> set[str]:
    """The kinds the sim world's CPU charges for the calibration's operations on ``backend``."""
    from models.config import SimConfig
    from models.cpu import NodeCpu
    from models.world import SimWorld

    seen: set[str] = set()
    serve = NodeCpu.serve

    async def observed(self, kind, nbytes=0, extra_ns=0):
        seen.add(kind)
        return await serve(self, kind, nbytes, extra_ns)

    monkeypatch.setattr(NodeCpu, "serve", observed)
    cls = backend_class(backend)
    world = SimWorld(1, SimConfig(service=cls.cpu.model(cls, cls.check_options({}, "sim"))))  # its committed calibration

    async def main(rt):
        design = backend_class(backend)(world)
        await design.start()
        ops = Cycles(design, rt, design.client(rt, True), design.client(rt, False))
        for i in range(cycles):
            for size in SIZES:
                await ops.cycle(i, b"x" * size)
        await design.stop()

    world.run(main)
    return seen


def test_kestrel_kinds_measured_are_the_kinds_the_sim_world_charges(monkeypatch):
    measured = set(calibrate("kestrel", 10, loopback=False, progress=False).fits)
    assert measured == _sim_kinds("kestrel", 10, monkeypatch)
    assert {"set", "get", "get/open", "get/close", "get/abort"} <= measured


def test_a_request_path_slower_for_real_calibrates_slower_and_its_waits_are_not_service_time(monkeypatch):
    before = calibrate("ideal", 20, loopback=False, progress=False).fits
    handle = IdealQueue.handle

    async def slow(self, source, request):
        if isinstance(request, Put):
            burn_cpu(300_000)  # 300 µs of CPU
            await self.rt.sleep(0.003)  # 3 ms of waiting: not service time
        return await handle(self, source, request)

    monkeypatch.setattr(IdealQueue, "handle", slow)
    after = calibrate("ideal", 20, loopback=False, progress=False).fits
    put_before, put_after = before["Put"].service.scale_ns, after["Put"].service.scale_ns
    assert 280_000 < put_after - put_before < 1_000_000, (put_before, put_after)
    assert after["Get"].service.scale_ns < 100_000  # the other kinds are not charged for it


@pytest.mark.parametrize("args, says", [
    (["nope"], "unknown backend 'nope'"),
    (["ideal", "--requests", "3"], "--requests 3"),
    (["ideal", "--out", "{tmp}"], "a folder"),
    (["ideal", "--out", "{tmp}/no/such/folder/c.yaml"], "no folder"),
])
def test_bad_arguments_are_one_line_errors(capsys, tmp_path, args, says):
    assert main(["calibrate", *(a.replace("{tmp}", str(tmp_path)) for a in args)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lab: error: ") and "\n" not in err and says in err, err
    assert not list(tmp_path.rglob("*.yaml"))


def test_the_command_prints_the_table_and_the_file_it_wrote(capsys, tmp_path):
    out = tmp_path / "c.yaml"
    assert main(["calibrate", "ideal", "--requests", "10", "--out", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"^kind\s+n\s+median µs\s+sigma\s+per-byte ns$", printed, re.M)
    assert re.search(r"^Put\s+40\s", printed, re.M) and f"written: {out}" in printed
    assert "Put" in ServiceModel.load(out).kinds


@pytest.mark.parametrize("design", own())  # the real brokers have no sim world to calibrate
def test_committed_calibrations_load_and_name_their_date_and_machine(design):
    cls = backend_class(design)
    path = cls.cpu.path(cls)
    model = ServiceModel.load(path)
    assert f"`lab calibrate {design}`" in path.read_text().splitlines()[0]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", model.measured["date"])
    assert model.measured["machine"]["cpus"] >= 1 and model.measured["machine"]["platform"]
    assert model.kinds and all(st.scale_ns > 0 for st in model.kinds.values())
    assert model.network is not None and model.network["ms"] > 0
    assert '"backends/*/calibration.yaml"' in (ROOT / "pyproject.toml").read_text()  # shipped with the package


def test_a_server_process_splits_the_round_trip_into_client_server_and_network():
    """Against Kestrel's own server process: its CPU per request beyond the handler's is the
    transport, this process's CPU per round trip the client's, and what is left the wire's."""
    calibration = calibrate("kestrel", 30, progress=False)
    probe = calibration.measured["network_probe"]
    model = calibration.model()
    assert model.transport_ns > 0 and model.client is not None and model.client.scale_ns > 0
    assert model.fsync is not None and model.fsync["ms"] > 0  # the machine's disk, measured
    server_us = probe["server_process_cpu_us_per_round_trip"]
    assert server_us == pytest.approx((model.transport_ns + probe["service_us_subtracted"] * 1e3) / 1e3, abs=0.02)
    assert model.client.scale_ns / 1e3 == pytest.approx(probe["client_cpu_us_per_round_trip"]["loaded"], abs=0.02)
    # an idle round trip is the client's and the server's CPU and the wire's two ways
    parts_us = model.client.scale_ns / 1e3 + server_us + 2 * model.network["ms"] * 1e3
    # (within the 1 µs floor each one-way half is clamped to: middle round trips near it move the median by up to 2 µs)
    assert parts_us == pytest.approx(probe["round_trip_us_median"], rel=0.02, abs=2.0) or model.network["ms"] == 0.001


def test_calibrate_starts_a_design_as_a_run_does_through_its_start(monkeypatch):
    """A design that does work in start() (here: records it, then puts a message once its
    nodes are up, as a design electing a primary would call one) is calibrated with that work
    done: calibrate goes through ``Backend.start``, not the nodes' boots alone."""
    from lab.backends.ideal.driver import IdealBackend
    import lab.experiments.calibrate as calibrate_module

    calls: list[str] = []

    class StartsWithWork(IdealBackend):
        async def start(self) -> None:
            await super().start()
            calls.append("start")
            client = self.client(self.world.node("starter"), False)
            await client.put("started", b"x")  # needs the nodes up: fails if start() ran before them
            await client.close()
            calls.append("put after start")

    monkeypatch.setattr(calibrate_module, "backend_class", lambda name: StartsWithWork)
    calibration = calibrate("ideal", 10, loopback=False, progress=False)
    assert calls == ["start", "put after start"]
    assert calibration is not None
