"""`lab bench`: the lab's benchmarks and each design's own, which print and save their figures."""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import UsageError, declared_part, design_parts
from lab.design.registry import REGISTRY


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab bench BENCHMARK`: the lab's benchmarks, then each design's."""
    p = sub.add_parser("bench", help="benchmarks that print and save their figures")
    bench = p.add_subparsers(dest="bench", required=True, metavar="BENCHMARK")
    from lab.experiments.bench import sim as bench_sim_module  # its flags are its own

    bench_sim_module.add_arguments(bench.add_parser("sim", help="the simulated world's cost against bare SimPy"))
    from lab.experiments.bench import checker as bench_checker_module

    bench_checker_module.add_arguments(bench.add_parser("checker", help=bench_checker_module.HELP))
    b = bench.add_parser("aggregate", help="the Spark pipeline on synthetic samples, beside DuckDB")
    b.add_argument("--rows", type=int, default=10_000_000, help="synthetic sample rows (default 10,000,000)")
    b.add_argument("--master", help="Spark master (default local[*])")
    b.add_argument("--cluster", action="store_true", help="start a standalone cluster (master + 2 workers) and use it")
    b.add_argument("--repeats", type=int, default=3, help="timed runs per case; the median is quoted (default 3)")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/aggregate-<time>.json)")
    b = bench.add_parser("loadgen", help="the lab's Locust user against a minimal one, both on memcached")
    b.add_argument("--duration", type=float, default=10.0, help="seconds of each Locust run (default 10)")
    b.add_argument("--users", type=int, default=20, help="Locust users in one process, closed loop (default 20)")
    b.add_argument("--repeats", type=int, default=3, help="rounds of both runs; medians are quoted (default 3)")
    b.add_argument("--out", type=Path, help="JSON file (default: results/bench/loadgen-<time>.json)")
    for name, module in design_parts("bench"):
        module.add_arguments(bench.add_parser(name, help=module.HELP))


def cmd_bench(args: argparse.Namespace) -> int:
    from lab.experiments.bench import save

    if args.repeats < 1:
        raise UsageError("--repeats must be >= 1")
    if args.bench == "sim":
        from lab.experiments.bench.sim import run as bench_sim

        try:
            results = bench_sim(args)
        except ValueError as e:
            raise UsageError(str(e)) from None
    elif args.bench == "checker":
        from lab.experiments.bench.checker import run as bench_checker

        try:
            results = bench_checker(args)
        except ValueError as e:  # a bad flag
            raise UsageError(str(e)) from None
    elif args.bench == "loadgen":
        from loadgen.bench import run as bench_loadgen  # the load generator's own benchmark, beside it

        try:
            results = bench_loadgen(args)
        except ValueError as e:  # a bad flag
            raise UsageError(str(e)) from None
    elif args.bench in REGISTRY:
        try:
            results = declared_part(args.bench, "bench").run(args)
        except ValueError as e:  # a bad flag
            raise UsageError(str(e)) from None
    else:
        from lab.experiments.bench.aggregate import bench_aggregate

        if args.rows < 1000:
            raise UsageError("--rows must be at least 1000")
        if args.cluster and args.master:
            raise UsageError("--cluster starts its own master; leave out --master")
        print(f"Spark pipeline on {args.rows:,} synthetic samples (median of {args.repeats}):")
        results = bench_aggregate(args.rows, args.master, args.repeats, args.cluster)
    print(f"saved: {save(args.bench, results, args.out)}")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"bench": cmd_bench}
