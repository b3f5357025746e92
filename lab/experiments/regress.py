"""`lab regress`: the CI regression gate — a short standard set run in both worlds, its
figures held against a committed baseline (``results/baselines/standard.json``).

The set: every registered design on two of the standard workloads, shortened
(``WORKLOADS``): ``steady`` (one producer at a fixed rate: latency when nothing is
stressed; its throughput is its rate) and ``burst-reliable`` (closed-loop producers and
reliable consumers: a slower design shows in its throughput as well as its latency). No
fault workloads. Every run is summarised by the Spark pipeline (``lab.aggregate.pipeline``, one
session, one pass over all the gate's runs): the ``measured`` rows (steady, fault and
heal phases).

Sim: one run per (design, workload) with the workload's seed. The sim world is a function
of its seed and the committed calibration files, so every figure of those rows (counts,
latency percentiles, per-second throughput percentiles) and the checker's totals must
equal the baseline's exactly: any difference is ``changed`` and fails the gate; if the
change is intended, ``--update --reason "..."`` records it.

Live: ``--repeats`` rounds; each round measures the calibration probe (``probe``: pure
Python CPU work and loopback TCP round trips, under a second) and then runs every
(design, workload) once, in an order shuffled per round from a fixed seed, so a slow
stretch of the machine falls on every design alike. A run's figures are normalised by
the median of its rounds' probes against the baseline's (``lab.experiments.regress_stats.normalised``)
and judged as asv does (``lab.experiments.regress_stats.judge``): REGRESSED only when the ratio of
the medians passes the metric's tolerance factor *and* a one-sided Mann–Whitney U test
over the rounds gives p < ``ALPHA``. Which metrics gate, and their factors, are in
``LIVE_METRICS``; the rest are reported (``worse`` when past their factor, which does not
fail the gate). The factors are wide because the committed baseline was measured on another machine than
CI's, and because live figures move between runs on the same machine (docs/regress.md has
the spread measured).

A (design, workload, world) that the baseline lacks, or whose workload the baseline knew
with other fields, is ``new`` or ``changed``: it fails until the baseline is updated.
``--update`` runs the set and writes its figures into the baseline (replacing those
entries, keeping the others), with the reason, date, git commit and machine appended to
its history. Output: the table, and ``regress.json`` and ``regress.md`` under
``results/regress/<time>/`` beside the runs. Exit status (``lab.cli``): 0 pass, 1 a
regression (or a changed or new entry), 2 a mistake in the command, found before anything
runs.

Spark's JVM starts in a thread while the sim runs (sim figures do not depend on how fast
the machine is), not beside the live runs. Tests show that the gate catches a slower
design with the test hook ``QUEUE_LAB_INJECT_SLOWDOWN=DESIGN:FACTOR``
(``lab.worlds.live.slowdown``: the live world's client requests to that design take FACTOR times
as long; never set outside tests).
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from lab.worlds import interrupt
from lab.design.registry import REGISTRY, backend_class, own
from lab.history.paths import REPO, results_dir
from lab.history.provenance import machine, versions
from lab.experiments.regress_compare import (ALPHA, Figures, LIVE_METRICS, Row, compare, failing, markdown_table,  # noqa: F401
                                  text_table, verdict_lines)
from lab.judge.summary import MEASURED
from lab.workloads.spec import Workload, load_workload

#: the set's workloads: standard ones, shortened so the whole gate takes minutes
WORKLOADS: dict[str, dict[str, Any]] = {"steady": {"warmup": 0.5, "duration": 2.0}, "burst-reliable": {"warmup": 0.5, "duration": 1.5}}
WORLDS = ("sim", "live")
DEFAULT_REPEATS = 4  # 4 against 4 rounds: the exact test can reach p = 1/70
ORDER_SEED = 0  # the live rounds' shuffles
FORMAT = 1  # of the baseline file


SIM_COLUMNS = ("count", "ok", "fail", "info", "bytes", "p50_ns", "p75_ns", "p90_ns", "p95_ns", "p99_ns", "p999_ns",
               "p9999_ns", "max_ns", "tput_p5", "tput_p50", "tput_p95")
CHECK_COLUMNS = ("attempts", "enqueued", "dequeued", "ok", "lost", "unexpected", "duplicated", "recovered")


class RegressError(ValueError):
    """A mistake in how the gate was called (the CLI prints it as one line, exit 2)."""


def default_baseline() -> Path:
    """The baseline where results go (a user's own, made with ``--update``), else the lab's
    committed one in its checkout: results follow the folder a command runs in, the
    committed baseline does not move with them."""
    own = results_dir() / "baselines" / "standard.json"
    committed = REPO / "results" / "baselines" / "standard.json"
    return own if own.exists() or not committed.exists() else committed


def workload(name: str) -> Workload:
    return dataclasses.replace(load_workload(name), **WORKLOADS[name])


def workload_spec(w: Workload) -> dict[str, Any]:
    """The fields that make a workload what it is (not where its file lives)."""
    spec = dataclasses.asdict(w)
    spec.pop("source", None)
    return json.loads(json.dumps(spec))


def choose(designs: Iterable[str] | None, workloads: Iterable[str] | None, worlds: Iterable[str] | None,
           repeats: int) -> tuple[list[str], list[str], list[str]]:
    """The set narrowed as asked; RegressError for a bad name or count, before anything runs."""
    designs = list(designs) if designs else sorted(own())  # the gate's baseline holds the lab's own
    workloads = list(workloads) if workloads else list(WORKLOADS)
    worlds = list(worlds) if worlds else list(WORLDS)
    for kind, names, known in (("design", designs, sorted(REGISTRY)), ("workload", workloads, list(WORKLOADS)),
                               ("world", worlds, list(WORLDS))):
        bad = [n for n in names if n not in known]
        if bad:
            raise RegressError(f"unknown {kind} {bad[0]!r} (the gate's: {', '.join(known)})")
    for d in designs:
        missing = [w for w in worlds if w not in backend_class(d).worlds]
        if missing:
            raise RegressError(f"{d} does not run in the {missing[0]} world")
    if repeats < 1:
        raise RegressError(f"--repeats {repeats}: use 1 or more")
    return designs, workloads, worlds


# ----------------------------------------------------------------------------- the probe


def probe(round_trips: int = 300) -> dict[str, float]:
    """The machine's speed now: ``cpu_us``, the best of five runs of fixed pure-Python work
    (pickling small requests, as a server and client do), and ``rtt_us``, the median round
    trip of 100 bytes over loopback TCP to an echo server on the live world's event loop in
    this process; ``probe_us`` is their geometric mean, what live figures are normalised by.

    The echo server is in this process on purpose: to one in a process of its own, the
    round trip took one of two values far apart from round to round (whether the two
    processes woke each other on one core or across two), and a probe is to say how fast
    the machine is, not where the scheduler put a process."""
    import asyncio
    import pickle
    import statistics

    from lab.worlds.live.world import run_event_loop

    def work() -> int:
        t0 = time.perf_counter_ns()
        for i in range(5000):
            pickle.loads(pickle.dumps((i, "q0", b"x" * 100, {"op": "put"})))
        return time.perf_counter_ns() - t0

    cpu = min(work() for _ in range(5))

    async def loopback() -> list[int]:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(4096):
                writer.write(data)

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*server.sockets[0].getsockname()[:2])
        times = []
        for i in range(round_trips + 20):
            t0 = time.perf_counter_ns()
            writer.write(b"p" * 100)
            await reader.readexactly(100)
            if i >= 20:
                times.append(time.perf_counter_ns() - t0)
        writer.close()
        server.close()
        return times

    rtt = statistics.median(run_event_loop(loopback()))
    return {"cpu_us": cpu / 1e3, "rtt_us": rtt / 1e3, "probe_us": (cpu * rtt) ** 0.5 / 1e3}


# ----------------------------------------------------------------------------- running


def key(design: str, workload_name: str) -> str:
    return f"{workload_name}/{design}"


def measure(designs: list[str], workloads: list[str], worlds: list[str], repeats: int, directory: Path,
            progress: bool = True, echo: Callable[[str], None] = print) -> Figures:
    """Run the set into ``directory`` (sim once, then live in interleaved rounds) and
    aggregate every run with Spark."""
    from tqdm import tqdm

    from lab.experiments.runner import run

    pairs = [(d, w) for w in workloads for d in designs]
    specs = {w: workload(w) for w in workloads}
    total = len(pairs) * (("sim" in worlds) + repeats * ("live" in worlds))
    runs: list[tuple[str, str, str, int, str]] = []  # (world, design, workload, round, run_id)
    probes: list[dict[str, float]] = []
    clock = {"start": time.monotonic()}
    # The JVM starts while the sim runs (their figures do not depend on the machine's speed),
    # not later beside live runs, whose figures do.
    spark = threading.Thread(target=_start_spark, name="regress-spark", daemon=True)
    spark.start()
    with tqdm(total=total, unit="run", desc="lab regress", disable=None if progress else True, leave=False) as bar:
        def go(world: str, design: str, name: str, rnd: int) -> None:
            bar.set_postfix_str(f"{world} {name} {design}", refresh=True)
            out = directory / "runs" / (f"{world}-{name}-{design}" + (f"-r{rnd}" if world == "live" else ""))
            result = run(specs[name], design, world, seed=specs[name].seed, out=out, progress=False)
            runs.append((world, design, name, rnd, result.run_id))
            bar.update(1)

        if "sim" in worlds:
            for design, name in pairs:
                go("sim", design, name, 0)
        clock["sim"] = time.monotonic()
        if "live" in worlds:
            for rnd in range(repeats):
                probes.append(probe())
                order = list(pairs)
                random.Random(f"{ORDER_SEED}:{rnd}").shuffle(order)
                for design, name in order:
                    go("live", design, name, rnd)
    clock["live"] = time.monotonic()
    echo(f"  {len(runs)} runs (sim {clock['sim'] - clock['start']:.0f} s, live {clock['live'] - clock['sim']:.0f} s); "
         "aggregating with Spark ...")
    spark.join()  # first: its thread may still be importing pyspark, and a second import meanwhile sees it half made
    from lab.aggregate.pipeline import aggregate
    from lab.aggregate.spark import spark_session

    agg = aggregate(spark_session(), [directory / "runs"], directory / "summary")
    echo(f"  Spark: {time.monotonic() - clock['live']:.0f} s")
    summary = agg.summary[agg.summary.phase == MEASURED]
    checks = agg.checks.set_index("run_id")
    figures = Figures()
    for world, design, name, rnd, run_id in runs:
        rows = {r["op"]: r for _, r in summary[summary.run_id == run_id].iterrows()}
        k = key(design, name)
        figures.verdicts.setdefault(f"{world} {k}", []).append(str(checks.loc[run_id, "verdict"]))
        if world == "sim":
            found = {f"{op}.{c}": _plain(rows[op][c]) for op in sorted(rows) for c in SIM_COLUMNS}
            found.update({f"checks.{c}": _plain(checks.loc[run_id, c]) for c in CHECK_COLUMNS})
            figures.sim[k] = {"workload": workload_spec(specs[name]), "figures": found}
        else:
            entry = figures.live.setdefault(k, {"workload": workload_spec(specs[name]), "probe_us": [],
                                                "figures": {m.name: [] for m in LIVE_METRICS}})
            entry["probe_us"].append(probes[rnd]["probe_us"])
            for m in LIVE_METRICS:
                entry["figures"][m.name].append(_plain(rows[m.op][m.column]) if m.op in rows else None)
    figures.probes = probes
    return figures


def _start_spark() -> None:
    from lab.aggregate.spark import spark_session

    try:
        spark_session()
    except Exception:  # Java missing, say: the main thread's own call reports it
        pass


def _plain(value: Any) -> Any:
    """A JSON number: ints stay ints, NaN is None."""
    if value is None or value != value:
        return None
    as_float = float(value)
    whole = as_float.is_integer() and abs(as_float) < 2**53 and not isinstance(value, float)
    return int(as_float) if whole else as_float


# ----------------------------------------------------------------------------- baseline and output


def read_baseline(path: Path, required: bool) -> dict[str, Any]:
    if not path.exists():
        if required:
            raise RegressError(f"no baseline at {path}: make one with --update --reason \"...\"")
        return {"format": FORMAT, "history": [], "sim": {}, "live": {}}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RegressError(f"--baseline {path}: not a readable baseline ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise RegressError(f"--baseline {path}: not a baseline of format {FORMAT}")
    return data


def provenance(reason: str) -> dict[str, Any]:
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"reason": reason, "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git("rev-parse", "HEAD") or "unknown", "dirty": bool(git("status", "--porcelain", "-uno")),
            "machine": machine(), "python": versions()["python"]}


def updated(baseline: dict[str, Any], figures: Figures, reason: str, repeats: int) -> dict[str, Any]:
    entries = [f"sim {k}" for k in sorted(figures.sim)] + [f"live {k}" for k in sorted(figures.live)]
    change = {**provenance(reason), "repeats": repeats, "entries": entries}
    out: dict[str, Any] = {"format": FORMAT, "history": [*baseline.get("history", []), change],
           "sim": {**baseline.get("sim", {}), **figures.sim}, "live": {**baseline.get("live", {}), **figures.live}}
    out["sim"] = dict(sorted(out["sim"].items()))
    out["live"] = dict(sorted(out["live"].items()))
    return out


@dataclass
class Outcome:
    rows: list[Row]
    directory: Path
    seconds: float
    updated: bool

    @property
    def passed(self) -> bool:
        return self.updated or not failing(self.rows)


def regress(designs: list[str], workloads: list[str], worlds: list[str], repeats: int, baseline_path: Path,
            update: bool = False, reason: str | None = None, out: Path | None = None, progress: bool = True,
            echo: Callable[[str], None] = print) -> Outcome:
    """Run the gate (or, with ``update``, refresh the baseline); the table and files written."""
    if update and not (reason or "").strip():
        raise RegressError("--update needs --reason \"why the figures changed\" (it goes into the baseline's history)")
    if reason and not update:
        raise RegressError("--reason goes with --update")
    baseline = read_baseline(baseline_path, required=not update)
    started = time.monotonic()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    directory = out or results_dir() / "regress" / stamp
    directory.mkdir(parents=True, exist_ok=True)
    echo(f"lab regress: {len(designs)} design(s) x {len(workloads)} workload(s), {' and '.join(worlds)}"
         + (f", {repeats} live round(s)" if "live" in worlds else "") + f"; baseline {baseline_path}")
    try:
        figures = measure(designs, workloads, worlds, repeats, directory, progress, echo)
    except KeyboardInterrupt:  # the run cut short removed its own folder; the finished ones stay
        interrupt.mark_interrupted(directory, "regress")
        raise
    rows = compare(figures, baseline)
    if update:
        baseline_path.parent.mkdir(parents=True, exist_ok=True)
        baseline_path.write_text(json.dumps(updated(baseline, figures, reason or "", repeats), indent=1) + "\n")
    outcome = Outcome(rows, directory, time.monotonic() - started, update)
    report = {"passed": outcome.passed, "updated": update, "seconds": round(outcome.seconds, 1),
              "baseline": str(baseline_path), "alpha": ALPHA, "repeats": repeats,
              "probes": figures.probes, "machine": machine(),
              "rows": [dataclasses.asdict(r) for r in rows], "figures": dataclasses.asdict(figures)}
    (directory / "regress.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    lines = verdict_lines(rows, update)
    (directory / "regress.md").write_text(f"# lab regress, {stamp}\n\n" + markdown_table(rows) + "\n\n"
                                          + "\n".join(lines) + "\n")
    return outcome
