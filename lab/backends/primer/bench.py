"""`lab bench primer`: what replication costs and what a net-split costs, per replication
setting, in one table each.

Settings: W = 1, 2, 3 with sync replication and W = 2, 3 chained, on three nodes.

- **Latency**: the standard ``steady`` workload (one producer at a fixed rate, one
  consumer) per setting and world; put and e2e p50/p99 of the measured phases. The sim
  world is deterministic (one run); live figures are the median over ``--repeats`` runs,
  the settings interleaved so that a noisy moment hits them all. W = 1 is the peer every
  other row is read against (``vs W=1``).
- **Splits**: a load with reliable consumers while the servers are split into a shape
  (``--shapes``; ``majority`` is two halves, one node against two) for a while, then
  healed; per setting and shape, the checker's lost, duplicated and reordered (inversions)
  counts and verdict, and the puts that started during the split, ok and not (a put that
  hangs until its timeout holds its producer back: few puts is a stalled side too).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

HELP = "put latency per replication setting (both worlds) and what a net-split costs each (the checker's counts)"

SETTINGS: dict[str, dict[str, Any]] = {
    "W=1": {"replicas": 1, "replication": "sync"},
    "W=2": {"replicas": 2, "replication": "sync"},
    "W=3": {"replicas": 3, "replication": "sync"},
    "W=2 chain": {"replicas": 2, "replication": "chain"},
    "W=3 chain": {"replicas": 3, "replication": "chain"},
}


def split_workload(shape: str) -> dict[str, Any]:
    return {"name": f"primer-split-{shape}", "description": f"servers split ({shape}) for 1.5 s under load",
            "queues": 1, "producers": 2, "consumers": 2, "message_size": 100, "rate": 500, "duration": 4,
            "warmup": 0.5, "ack": "reliable", "seed": 17,
            "faults": [{"fault": "partition", "at": 1.0, "duration": 1.5, "target": "servers", "shape": shape}]}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--worlds", default="sim,live", help="worlds for the latency table (default sim,live)")
    p.add_argument("--split-worlds", default="sim,live", help="worlds for the split table (default sim,live)")
    p.add_argument("--repeats", type=int, default=3, help="live runs per setting, interleaved (default 3)")
    p.add_argument("--shapes", default="majority,bridge",
                   help="partition shapes over the three servers (default majority,bridge)")
    p.add_argument("--out", type=Path, help="JSON file (default: results/bench/primer-<time>.json)")


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f} ms"


def _measured(result: Any, op: str, key: str) -> float | None:
    entry = result.summary.get("measured", {}).get(op) or {}
    return entry.get(key)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from lab.experiments.runner import run as run_workload
    from lab.workloads.spec import load_workload, parse_workload

    worlds = [w for w in args.worlds.split(",") if w]
    split_worlds = [w for w in args.split_worlds.split(",") if w]
    shapes = [s for s in args.shapes.split(",") if s]
    for w in {*worlds, *split_worlds}:
        if w not in ("sim", "live"):
            raise ValueError(f"--worlds {w!r}: use sim and/or live")
    if args.repeats < 1:
        raise ValueError(f"--repeats {args.repeats}: use 1 or more")
    from lab.workloads.fault_base import SHAPES

    for shape in shapes:
        if shape not in SHAPES or shape == "clients":
            raise ValueError(f"--shapes {shape!r}: use shapes over servers ({', '.join(s for s in SHAPES if s != 'clients')})")
    steady = load_workload("steady")  # the standard workload, by name

    latency: dict[str, dict[str, dict[str, float | None]]] = {}
    for world in worlds:
        repeats = 1 if world == "sim" else args.repeats
        runs: dict[str, list[Any]] = {name: [] for name in SETTINGS}
        for r in range(repeats):
            for name, options in SETTINGS.items():
                print(f"latency: {name}, {world} world, run {r + 1}/{repeats}", flush=True)
                runs[name].append(run_workload(steady, "primer", world, progress=False, options=options))
        for name, done in runs.items():
            latency.setdefault(name, {})[world] = {
                key: statistics.median(v for v in (_measured(res, op, stat) for res in done) if v is not None)
                for key, op, stat in (("put_p50_ns", "put", "p50_ns"), ("put_p99_ns", "put", "p99_ns"),
                                      ("e2e_p50_ns", "e2e", "p50_ns"), ("e2e_p99_ns", "e2e", "p99_ns"))}

    splits: list[dict[str, Any]] = []
    for world in split_worlds:
        for shape in shapes:
            workload = parse_workload(split_workload(shape), f"<lab bench primer: {shape}>")
            for name, options in SETTINGS.items():
                print(f"split: {name}, {shape}, {world} world", flush=True)
                res = run_workload(workload, "primer", world, progress=False, options=options)
                c = res.check
                ok, not_ok = _split_puts(res)
                splits.append({"setting": name, "shape": shape, "world": world, "lost": c.counts.lost,
                               "duplicated": c.counts.duplicated, "inversions": c.reordering.inversions,
                               "split_puts_ok": ok, "split_puts_not_ok": not_ok,
                               "verdict": str(c.verdict), "reason": c.reason,
                               "run_dir": str(res.run_dir)})

    results = {"settings": SETTINGS, "latency": latency, "splits": splits, "repeats": args.repeats}
    print()
    print(_latency_table(latency, worlds))
    print()
    print(_split_table(splits))
    return results


def _split_puts(result: Any) -> tuple[int, int]:
    """Puts that started during the split: (ok, not ok). A put that hangs until its timeout
    holds its producer back, so few puts and many failures both mean a stalled side."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    table = pq.read_table(result.samples_path, columns=["op", "phase", "outcome"])
    puts = table.filter(pc.and_(pc.equal(table["op"], "put"), pc.equal(table["phase"], "fault")))
    ok = int(pc.sum(pc.equal(puts["outcome"], "ok")).as_py() or 0)
    return ok, puts.num_rows - ok


def _latency_table(latency: dict[str, Any], worlds: list[str]) -> str:
    lines = ["| setting | " + " | ".join(f"{w} put p50 | {w} put p99 | {w} vs W=1 (p50)" for w in worlds) + " |",
             "|---" * (1 + 3 * len(worlds)) + "|"]
    for name, by_world in latency.items():
        cells = []
        for w in worlds:
            figures = by_world.get(w, {})
            base = latency["W=1"].get(w, {}).get("put_p50_ns")
            p50 = figures.get("put_p50_ns")
            cells += [_ms(p50), _ms(figures.get("put_p99_ns")), f"{p50 / base:.2f}×" if p50 and base else "-"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _split_table(splits: list[dict[str, Any]]) -> str:
    lines = ["| setting | shape | world | lost | duplicated | inversions | puts in the split: ok / not ok | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for s in splits:
        lines.append(f"| {s['setting']} | {s['shape']} | {s['world']} | {s['lost']} | {s['duplicated']} | "
                     f"{s['inversions']} | {s['split_puts_ok']} / {s['split_puts_not_ok']} | {s['verdict']} |")
    return "\n".join(lines)
