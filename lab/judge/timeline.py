"""One message's story, and the run's anomalous messages: the judge's room that reads a run
folder back for `lab explain`.

A run folder (samples.parquet, manifest.json) is judged again here exactly as the checker
judged it (``lab.judge.checker``: the same message codes, the same lost / duplicated /
overtaken counts), and each anomalous message is explained alone by
``lab.judge.attribution.attribute`` with count arrays that are zero but for it, so the
explanation given for one message is the one the verdict counted for it.

The samples record the client's node for each operation, not the server it reached; the
server nodes are those a fault struck that no client runs on, so a one-server design's
holder is known, and a replicated one's is named as the set of its servers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from lab.design.promises import NO_ORDER, FIFO_PER_CONSUMER, Promises
from lab.history.record import FAULT_OP, mask, message_codes, read_samples
from lab.judge import words
from lab.judge.attribution import attribute
from lab.judge.fault_scopes import Fault, faults_of
from lab.judge.checker import tallies
from lab.judge.findings import Explanation
from lab.judge.order import check_order
from lab.judge.verdict import RunFacts

ANOMALIES = ("lost", "duplicated", "overtaken")


class NotARun(ValueError):
    """A folder that holds no run (no manifest.json or samples.parquet)."""


class UnknownMessage(ValueError):
    """A message id the run never saw."""


@dataclass(frozen=True)
class Op:
    op: str
    client: str
    node: str
    start: int
    end: int
    outcome: str
    error: str | None


@dataclass
class Story:
    """One message: its operations in time order, its anomalies, the faults that overlap its
    life, the server nodes that could hold it, and the explanation of each anomaly."""

    msg_id: str
    ops: list[Op]
    anomalies: dict[str, int]
    faults: list[Fault]
    servers: list[str]
    explained: list[Explanation] = field(default_factory=list)
    unexplained: list[str] = field(default_factory=list)


@dataclass
class Run:
    """A run folder read back and counted as the checker counts it."""

    directory: Path
    manifest: dict[str, Any]
    samples: pa.Table
    ids: pa.Array
    codes: np.ndarray
    promises: Promises
    lost: np.ndarray
    duplicated: np.ndarray
    overtaken: np.ndarray | None

    @property
    def start_ns(self) -> int:
        t = self.samples.column("t_start_ns").to_numpy(zero_copy_only=False)
        return int(t.min()) if len(t) else 0

    def code_of(self, msg_id: str) -> int:
        found = np.flatnonzero(np.asarray(self.ids.to_pylist(), dtype=object) == msg_id)
        if not found.size:
            raise UnknownMessage(f"{msg_id}: no such message in {self.directory} (`lab explain "
                                 f"{self.directory}` lists the anomalous ones)")
        return int(found[0])

    def servers(self) -> list[str]:
        """The nodes no client runs on that a fault struck: the servers the samples know of."""
        is_op = ~mask(self.samples, "op", FAULT_OP)
        clients = set(self.samples.filter(pa.array(is_op)).column("node").to_pylist())
        return sorted({n for f in faults_of(self.samples) for n in f.nodes} - clients)


def load(directory: Path) -> Run:
    """Read and count a run folder; NotARun if it is none."""
    manifest_path, samples_path = directory / "manifest.json", directory / "samples.parquet"
    if not directory.is_dir() or not manifest_path.is_file() or not samples_path.is_file():
        raise NotARun(f"{directory}: not a run's folder (it needs manifest.json and samples.parquet)")
    try:
        manifest = json.loads(manifest_path.read_text())
        samples = read_samples(samples_path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise NotARun(f"{directory}: not a readable run: {e}") from None
    if not isinstance(manifest, dict) or "backend" not in manifest:
        raise NotARun(f"{manifest_path}: not a run's manifest")
    promises = RunFacts.from_manifest(manifest).promises()
    ids, codes = message_codes(samples)
    lost, duplicated = anomaly_counts(samples, codes, len(ids))
    overtaken = None
    if promises.order != NO_ORDER:
        overtaken = check_order(samples, codes, len(ids), per_consumer=promises.order == FIFO_PER_CONSUMER).counts
    return Run(directory, manifest, samples, ids, codes, promises, lost, duplicated, overtaken)


def anomaly_counts(samples: pa.Table, codes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per message, (lost, duplicated) as ``lab.judge.checker.check`` counts them."""
    counted = tallies(samples, codes, n)
    return counted.lost, counted.duplicated


def _only(counts: np.ndarray | None, code: int) -> np.ndarray | None:
    if counts is None:
        return None
    one = np.zeros_like(counts)
    one[code] = counts[code]
    return one


def story(run: Run, msg_id: str) -> Story:
    """The story of one message (UnknownMessage if the run never saw it)."""
    code = run.code_of(msg_id)
    rows = np.flatnonzero(run.codes == code)
    part = run.samples.take(pa.array(rows))
    ops = sorted((Op(op, client, node, start, start + latency, outcome, error)
                  for op, client, node, start, latency, outcome, error in zip(
                      *(part.column(c).to_pylist() for c in ("op", "client", "node", "t_start_ns", "latency_ns",
                                                              "outcome", "error")))),
                 key=lambda o: o.start)
    anomalies = {"lost": int(run.lost[code]), "duplicated": int(run.duplicated[code]),
                 "overtaken": int(run.overtaken[code]) if run.overtaken is not None else 0}
    born = ops[0].start if ops else 0
    faults = [f for f in faults_of(run.samples) if f.heal >= born]
    result = Story(msg_id, ops, {k: v for k, v in anomalies.items() if v}, faults, run.servers())
    if result.anomalies:
        a = attribute(run.samples, run.codes, run.promises, lost=_only(run.lost, code),  # type: ignore[arg-type]
                      duplicated=_only(run.duplicated, code),  # type: ignore[arg-type]
                      overtaken=_only(run.overtaken, code))
        result.explained = list(a.explained)
        result.unexplained = sorted(a.unexplained)
    return result


def anomalous(run: Run) -> list[Story]:
    """Every anomalous message, those nothing explains first, each in id order."""
    chosen = (run.lost > 0) | (run.duplicated > 0)
    if run.overtaken is not None:
        chosen |= run.overtaken > 0
    ids = run.ids.to_pylist()
    stories = [story(run, ids[c]) for c in sorted(np.flatnonzero(chosen).tolist(), key=lambda c: ids[c])]
    return sorted(stories, key=lambda s: not s.unexplained)


def seconds(run: Run, t: int) -> str:
    return f"{(t - run.start_ns) / 1e9:8.3f}s"


def one_line(run: Run, s: Story) -> str:
    said = ", ".join(f"{k}" + (f" x{n}" if n > 1 else "") for k, n in s.anomalies.items())
    why = "; ".join(words.explanation(e) for e in s.explained) if s.explained else ""
    if s.unexplained:
        return f"{s.msg_id:<16} {said}: UNEXPLAINED ({', '.join(s.unexplained)})" + (f"; {why}" if why else "")
    return f"{s.msg_id:<16} {said}: {why}"


def describe(run: Run, s: Story) -> list[str]:
    """The story of one message in lines."""
    lines = [f"message {s.msg_id} of run {run.directory} ({run.manifest.get('backend')}, "
             f"{run.manifest.get('world')}); times from the run's first row"]
    put = next((o for o in s.ops if o.op == "put" and o.outcome == "ok"), None) or next(
        (o for o in s.ops if o.op == "put"), None)
    holder = (s.servers[0] if len(s.servers) == 1 else "one of " + ", ".join(s.servers) if s.servers
              else "unknown (no fault named a server node)")
    lines.append(f"held by: {holder} (the server the put went to; the samples record the client's node)")
    lines.append("timeline:")
    for o in s.ops:
        error = f" ({o.error})" if o.error else ""
        lines.append(f"  {seconds(run, o.start)} .. {seconds(run, o.end).strip():>9}  {o.op:<7} {o.outcome:<4} "
                     f"client {o.client} on {o.node}{error}")
    if put is None:
        lines.append("  (no put of it recorded)")
    lines.append("faults in force in its life:" if s.faults else "faults in force in its life: none")
    for f in s.faults:
        heal = "never healed" if f.heal == np.iinfo(np.int64).max else f"healed {seconds(run, f.heal).strip()}"
        struck = ", ".join(sorted(f.nodes)) or "no node in particular"
        mine = " (its holder)" if f.nodes & set(s.servers) else ""
        lines.append(f"  {f.kind} from {seconds(run, f.start).strip()}, {heal}; struck {struck}{mine}")
    if not s.anomalies:
        lines.append("verdict: nothing anomalous about it")
    for e in s.explained:
        lines.append(f"verdict: {e.anomaly} {words.explanation(e)}")
    for anomaly in s.unexplained:
        lines.append(f"verdict: {anomaly}, and nothing explains it: a broken promise")
    return lines
