"""`lab bench sim`: what the simulated world costs, against bare SimPy in the same run.

Five measurements, repeated round-robin and reported as medians:

- bare SimPy: a loop of ``env.timeout`` (events/s) and a Store put/get ping-pong (pairs/s);
- the Runtime driver: a core's ``await rt.sleep`` loop (the same events through ``_drive``);
- the simulated network: ``rt.net.call`` round trips to an echo handler (one call is two
  messages, a handler process and a reply);
- the whole model: the runner's operations per wall-second with the ideal backend at full
  speed (closed loop), which is the number that bounds scenario sizes.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import simpy

from models.network import LatencyModel
from models.world import SimConfig, SimWorld


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
    world = SimWorld(seed=0)

    async def main(rt):
        for _ in range(n):
            await rt.sleep(1e-6)

    world.run(main)
    return n


def network_calls(n: int) -> int:
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
    from lab.backends import CONTROL
    from lab.runner import run
    from lab.workload import parse_workload

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
