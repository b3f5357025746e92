"""`lab bench redis`: Redis's put throughput through the lab's two clients, beside Redis's own
benchmark tool, in one run.

Three cases, each against a Redis started the same way (the peer's launch: AOF on,
``appendfsync`` as asked, its data dir on the power-loss file system where FUSE is), each
with the same number of concurrent clients, each appending the same entries (``XADD``):

- ``redis-benchmark`` (Debian's ``redis-tools``): ``-c C -n N XADD ...``, its own requests/s;
- ``runner``: the lab's asyncio client (``lab run``'s), C producers in a closed loop, N puts,
  timed from the first put's start to the last put's end;
- ``locust``: the lab's Locust user (``lab load``), C users all producing, for ``--duration``.

Rounds interleave the cases; the median of the rounds is quoted, and each client's ratio to
``redis-benchmark`` — how much of the server's speed a client of the lab leaves on the table.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HELP = "Redis's put throughput through the lab's runner client and Locust user, beside redis-benchmark"
CASES = ("redis-benchmark", "runner", "locust")
SIZE = 100  # bytes per entry, as the standard workloads


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clients", type=int, default=50, help="concurrent clients in every case (default 50)")
    p.add_argument("--puts", type=int, default=20000, help="entries per redis-benchmark and runner case (default 20000)")
    p.add_argument("--duration", type=float, default=8.0, help="seconds of the Locust case (default 8)")
    p.add_argument("--appendfsync", default="everysec", choices=("always", "everysec", "no"),
                   help="the server's appendfsync (default everysec, Redis's own)")
    p.add_argument("--repeats", type=int, default=3, help="rounds of all three cases; medians are quoted (default 3)")
    p.add_argument("--out", type=Path, help="JSON file (default: results/bench/redis-<time>.json)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.clients < 1 or args.puts < args.clients or args.duration <= 0:
        raise ValueError("--clients >= 1, --puts >= --clients and --duration > 0")
    tool = shutil.which("redis-benchmark")
    if tool is None:
        raise ValueError("redis-benchmark is not installed: apt-get install redis-tools (or `make brokers`)")
    options = {"appendfsync": args.appendfsync}
    rounds: dict[str, list[float]] = {case: [] for case in CASES}
    print(f"Redis XADD of {SIZE} B, {args.clients} clients, appendfsync={args.appendfsync}, "
          f"{args.repeats} round(s):")
    for round_ in range(args.repeats):
        for case in CASES:
            rate = {"redis-benchmark": _redis_benchmark, "runner": _runner, "locust": _locust}[case](args, options, tool)
            rounds[case].append(rate)
            print(f"  round {round_ + 1}: {case:<16} {rate:>10,.0f} puts/s")
    medians = {case: statistics.median(rates) for case, rates in rounds.items()}
    peer = medians["redis-benchmark"]
    print(f"{'case':<16} {'puts/s (median)':>16} {'ratio to redis-benchmark':>26}")
    for case in CASES:
        print(f"{case:<16} {medians[case]:>16,.0f} {medians[case] / peer:>26.3f}")
    return {"clients": args.clients, "puts": args.puts, "duration_s": args.duration,
            "appendfsync": args.appendfsync, "rounds": rounds, "median_puts_per_s": medians,
            "ratio_to_redis_benchmark": {case: medians[case] / peer for case in CASES}}


def _redis_benchmark(args: argparse.Namespace, options: dict[str, Any], tool: str) -> float:
    """Redis's own tool against a Redis the peer starts; its requests/s."""
    from lab.design.worlds import LiveWorld
    from lab.peers.redis.driver import RedisPeer

    world = LiveWorld()

    async def main(control: Any) -> float:
        peer = RedisPeer(world, options)
        await peer.start()
        await peer.prepare(["bench"])
        host, port = peer.address(None)
        argv = [tool, "-h", host, "-p", str(port), "-c", str(args.clients), "-n", str(args.puts), "--csv",
                "XADD", "bench", "*", "b", "x" * SIZE]
        done = await asyncio.get_running_loop().run_in_executor(
            None, lambda: subprocess.run(argv, capture_output=True, text=True, timeout=600))
        await peer.stop()
        if done.returncode != 0:
            raise RuntimeError(f"redis-benchmark failed: {done.stderr.strip()[-500:]}")
        return _csv_rate(done.stdout)

    return world.run(main)


def _csv_rate(text: str) -> float:
    """The requests/s of redis-benchmark's ``--csv`` output (a header, then a row per test)."""
    rows = [line for line in text.splitlines() if line.strip()]
    return float(rows[-1].split(",")[1].strip('"'))


def _runner(args: argparse.Namespace, options: dict[str, Any], tool: str) -> float:
    """The lab's asyncio client as ``lab run`` drives it: C producers, closed loop, N puts."""
    from lab.experiments.runner import run
    from lab.workloads.spec import parse_workload

    workload = parse_workload({"name": "bench-redis", "producers": args.clients, "consumers": 0, "queues": 1,
                               "messages": args.puts, "message_size": SIZE, "ack": "reliable", "warmup": 0})
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as folder:
        result = run(workload, "redis", "live", out=Path(folder) / "run", progress=False, options=options)
        return _put_rate(result.run_dir)


def _locust(args: argparse.Namespace, options: dict[str, Any], tool: str) -> float:
    """The lab's Locust user as ``lab load`` drives it: C users, all producers."""
    from lab.experiments.load import run_load

    with tempfile.TemporaryDirectory(prefix="bench-redis-") as folder:
        result = run_load("redis", users=args.clients, spawn_rate=args.clients * 10, duration=args.duration,
                          producers=1, consumers=0, size=SIZE, options=options, out=Path(folder) / "run",
                          echo=lambda *a, **k: None)
        return _put_rate(result.run_dir)


def _put_rate(run_dir: Path) -> float:
    """Acknowledged puts per second, from the first put's start to the last put's end."""
    import pyarrow.compute as pc

    from lab.history.record import read_samples

    table = read_samples(run_dir, ["op", "outcome", "t_start_ns", "latency_ns"])
    puts = table.filter(pc.and_(pc.equal(table["op"], "put"), pc.equal(table["outcome"], "ok")))
    if puts.num_rows < 2:
        raise RuntimeError(f"{run_dir}: fewer than two acknowledged puts")
    start = pc.min(puts["t_start_ns"]).as_py()
    end = pc.max(pc.add(puts["t_start_ns"], puts["latency_ns"])).as_py()
    return puts.num_rows / ((end - start) / 1e9)
