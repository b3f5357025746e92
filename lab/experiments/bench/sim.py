"""`lab bench sim`: what the simulated world costs, against bare SimPy in the same run.

Five measurements, repeated round-robin and reported as medians:

- bare SimPy: a loop of ``env.timeout`` (events/s) and a Store put/get ping-pong (pairs/s);
- the Runtime driver: a core's ``await rt.sleep`` loop (the same events through the driver, ``models.driver``);
- the simulated network: ``rt.net.call`` round trips to an echo handler (one call is two
  messages, a handler process and a reply);
- the whole model: the runner's operations per wall-second with the ideal backend at full
  speed (closed loop), which is the number that bounds scenario sizes.

``--hour`` measures something else: one simulated hour of the standard ``steady`` workload
on Kestrel (``hour_backend``; its duration set to 3,600 s), run in a child process so that its peak resident
memory is the run's own; it reports the wall seconds and that peak.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import simpy


def _interleaved(cases: dict[str, Callable[[], int]], repeats: int) -> dict[str, list[float]]:
    """Rates (units per wall-second) of each case, run round-robin so that drift in a
    shared machine's speed hits every case alike."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            units = fn()
            rates[name].append(units / (time.perf_counter() - start))
    return rates


def bare_timeouts(n: int) -> int:
    env = simpy.Environment()

    def loop():
        for _ in range(n):
            yield env.timeout(1)

    env.process(loop())
    env.run()
    return n


def bare_store_pairs(n: int) -> int:
    env = simpy.Environment()
    store = simpy.Store(env)

    def producer():
        for i in range(n):
            yield store.put(i)
            yield env.timeout(1)

    def consumer():
        for _ in range(n):
            yield store.get()

    env.process(producer())
    env.process(consumer())
    env.run()
    return n


def driver_sleeps(n: int) -> int:
    from models.world import SimWorld

    world = SimWorld(seed=0)

    async def main(rt):
        for _ in range(n):
            await rt.sleep(1e-6)

    world.run(main)
    return n


def network_calls(n: int) -> int:
    from models.config import SimConfig
    from models.latency import LatencyModel
    from models.world import SimWorld

    world = SimWorld(seed=0, config=SimConfig(latency=LatencyModel(dist="constant", ms=0.1)))

    async def main(rt):
        async def boot(node):
            async def echo(source, message):
                return message

            await node.net.serve(echo)

        await world.start("server", boot)
        client = world.node("client")
        for i in range(n):
            await client.net.call("server", i, timeout=1.0)

    world.run(main)
    return n


def full_model(messages: int) -> int:
    from lab.design.registry import CONTROL
    from lab.experiments.runner import run
    from lab.workloads.spec import parse_workload

    workload = parse_workload({"name": "bench-sim", "producers": 4, "consumers": 4, "queues": 2,
                               "messages": messages, "ack": "reliable", "seed": 1})
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        result = run(workload, CONTROL, "sim", out=out, progress=False)
    return result.samples


def bench_sim(scale: float = 1.0, repeats: int = 5, echo: Callable[[str], None] = print) -> dict[str, Any]:
    n = max(1000, int(200_000 * scale))
    cases = {
        "simpy_timeouts_per_s": lambda: bare_timeouts(n),
        "simpy_store_pairs_per_s": lambda: bare_store_pairs(n // 2),
        "runtime_sleeps_per_s": lambda: driver_sleeps(n),
        "runtime_calls_per_s": lambda: network_calls(n // 10),
        "runner_ops_per_s": lambda: full_model(max(500, n // 10)),
    }
    results: dict[str, Any] = {}
    for name, rates in _interleaved(cases, repeats).items():
        results[name] = {"median": statistics.median(rates), "runs": rates}
        echo(f"  {name:<26} {statistics.median(rates):>12,.0f}   (runs: {', '.join(f'{r:,.0f}' for r in rates)})")
    base = results["simpy_timeouts_per_s"]["median"]
    store = results["simpy_store_pairs_per_s"]["median"]
    results["ratios"] = {
        "runtime_sleeps_vs_simpy_timeouts": results["runtime_sleeps_per_s"]["median"] / base,
        "runtime_calls_vs_simpy_store_pairs": results["runtime_calls_per_s"]["median"] / store,
        "runner_ops_vs_simpy_store_pairs": results["runner_ops_per_s"]["median"] / store,
    }
    for name, ratio in results["ratios"].items():
        echo(f"  {name:<40} {ratio:.2f}x")
    return results


HOUR_WORKLOAD = "steady"


def hour_backend() -> str:
    """The design ``--hour`` runs by default: the first one registered after the control
    (``lab.design.registry.REGISTRY`` is the one place a design is named)."""
    from lab.design.registry import CONTROL, REGISTRY

    return next(name for name in REGISTRY if name != CONTROL)


def hour_child(seconds: float, backend: str, out: str) -> dict[str, Any]:
    """In the child process: ``seconds`` of simulated ``steady`` on ``backend``; its figures."""
    from dataclasses import replace

    from lab.experiments.runner import run
    from lab.workloads.spec import load_workload

    workload = replace(load_workload(HOUR_WORKLOAD), duration=seconds)
    start = time.perf_counter()
    result = run(workload, backend, "sim", out=out, progress=False)
    wall = time.perf_counter() - start
    return {"workload": HOUR_WORKLOAD, "backend": backend, "simulated_seconds": result.world_seconds,
            "samples": result.samples, "wall_seconds": wall, "world_run_wall_seconds": result.wall_seconds,
            "samples_per_wall_second": result.samples / wall, "verdict": str(result.verdict),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,  # Linux: KiB
            "parquet_bytes": (result.run_dir / "samples.parquet").stat().st_size}


def bench_hour(seconds: float = 3600.0, backend: str | None = None,
               echo: Callable[[str], None] = print) -> dict[str, Any]:
    """One simulated hour (``seconds``) of ``steady`` on ``backend`` (default ``hour_backend()``)
    in a child process."""
    backend = backend or hour_backend()
    with tempfile.TemporaryDirectory() as out:
        code = ("import json, sys; from lab.experiments.bench.sim import hour_child; "
                f"print(json.dumps(hour_child({seconds!r}, {backend!r}, sys.argv[1])))")
        done = subprocess.run([sys.executable, "-c", code, out], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the child run failed: {done.stderr.strip()[-2000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    echo(f"  {figures['simulated_seconds']:,.0f} simulated s of {HOUR_WORKLOAD} on {backend}: "
         f"{figures['samples']:,} samples in {figures['wall_seconds']:.1f} wall s "
         f"({figures['world_run_wall_seconds']:.1f} s in the world, the rest writing and checking), "
         f"peak RSS {figures['peak_rss_bytes'] / 2**20:,.0f} MiB, verdict {figures['verdict']}")
    return figures


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``lab bench sim``'s flags."""
    parser.add_argument("--scale", type=float, default=1.0, help="work per case, relative (default 1.0)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per case; the median is quoted (default 5)")
    parser.add_argument("--hour", action="store_true",
                        help=f"instead: one simulated hour of {HOUR_WORKLOAD} on {hour_backend()} in a child process "
                             "(wall seconds, peak RSS)")
    parser.add_argument("--seconds", type=float, default=3600.0,
                        help="with --hour: the simulated seconds of the load (default 3600)")
    parser.add_argument("--backend", help=f"with --hour: the design (default {hour_backend()})")
    parser.add_argument("--out", type=Path, help="JSON file (default: results/bench/sim-<time>.json)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    """``lab bench sim`` with its parsed flags: the figures to save."""
    if args.hour:
        if not args.seconds > 0:
            raise ValueError("--seconds must be > 0")
        backend = args.backend or hour_backend()
        print(f"sim world: {args.seconds:g} simulated s of {HOUR_WORKLOAD} on {backend} (a child process):")
        return {"hour": bench_hour(args.seconds, backend)}
    if args.repeats < 1:
        raise ValueError("--repeats must be >= 1")
    if not args.scale > 0:
        raise ValueError("--scale must be > 0")
    print(f"sim world vs bare SimPy (median of {args.repeats}, per wall-second):")
    return bench_sim(args.scale, args.repeats)
