"""`lab report`: runs as one self-contained HTML file, to open in any browser.

Tables and charts are inline: the charts are PNGs in ``data:image/png;base64`` URIs, the
style sheet sits in the page, and nothing is fetched (no scripts, fonts or links out), so
the file opens without Jupyter, a server or a network. Every run's row comes from its
``manifest.json`` (the measured phases of its summary, and its verdict); each workload's
chart is latency by percentile (``lab.present.plots.latency_figure``) of put and end to end, from
its ``samples.parquet`` over the measured phases.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from lab.worlds import interrupt
from lab.history.record import MEASURED_PHASES, ok_ops, read_samples
from lab.judge.summary import MEASURED, end_to_end_ns, format_ns

SAMPLE_COLUMNS = ("op", "outcome", "msg_id", "phase", "t_start_ns", "latency_ns")

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f0f0f0; } td.text { text-align: left; }
td.valid { color: #1a7f37; } td.allowed { color: #9a6700; } td.invalid { color: #cf222e; font-weight: bold; }
img { max-width: 100%; }
.muted { color: #666; font-size: 0.85em; }
"""


class NoRuns(ValueError):
    """A path that is not a run's folder, nor a folder of runs."""


@dataclass
class Run:
    directory: Path
    manifest: dict[str, Any]

    @property
    def backend(self) -> str:
        return str(self.manifest.get("backend", "?"))

    @property
    def world(self) -> str:
        return str(self.manifest.get("world", "?"))

    @property
    def workload(self) -> str:
        workload = self.manifest.get("workload")
        return str(workload.get("name", "?")) if isinstance(workload, dict) else str(workload or "?")


def _is_run(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def find_runs(paths: Iterable[str | Path], skipped: list[str] | None = None) -> list[Run]:
    """Every run under ``paths``: a run's folder, or a folder whose subfolders are runs (a
    `lab compare` output). A path that is neither raises NoRuns. A folder an interrupt cut
    short (``lab.worlds.interrupt``) is skipped, a line naming it added to ``skipped``; none left
    raises NoRuns."""
    runs: list[Run] = []
    said: list[str] = []
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            raise NoRuns(f"{path}: no such folder (give a run's folder, or a folder of runs)")
        cut = interrupt.inside_interrupted(path)
        if cut is not None:
            said.append(interrupt.skipped_line(path, cut))
            continue
        folders = [path] if _is_run(path) else sorted(p for p in path.iterdir() if p.is_dir() and _is_run(p))
        cut_short = [f for f in folders if interrupt.interrupted(f)]
        said += [interrupt.skipped_line(folder, folder) for folder in cut_short]
        folders = [f for f in folders if f not in cut_short]
        if not folders and cut_short:
            continue
        if not folders:
            raise NoRuns(f"{path}: not a run's folder and holds none (no manifest.json)")
        for folder in folders:
            if not (folder / "samples.parquet").is_file():
                raise NoRuns(f"{folder}: a run without samples.parquet")
            try:
                manifest = json.loads((folder / "manifest.json").read_text())
            except (OSError, ValueError) as e:
                raise NoRuns(f"{folder / 'manifest.json'}: not readable JSON: {e}") from None
            if not isinstance(manifest, dict):
                raise NoRuns(f"{folder / 'manifest.json'}: not a run's manifest")
            runs.append(Run(folder, manifest))
    if skipped is not None:
        skipped += said
    if not runs and said:
        raise NoRuns("no runs to report: " + "; ".join(line.removeprefix("lab: ") for line in said))
    return runs


def _e(value: Any) -> str:
    return html.escape(str(value))


def _number(value: Any, digits: int = 0) -> str:
    if not isinstance(value, (int, float)) or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def _latency(stats: dict[str, Any], key: str) -> str:
    value = stats.get(key)
    return format_ns(float(value)) if isinstance(value, (int, float)) else "-"


COLUMNS = ("workload", "backend", "world", "verdict", "put/s", "get/s", "put p50", "put p99", "put p99.9",
           "e2e p50", "e2e p99", "lost", "duplicated", "reason")


def _row(run: Run) -> str:
    summary = run.manifest.get("summary") or {}
    measured = summary.get(MEASURED) or {}
    put, get, e2e = (measured.get(op) or {} for op in ("put", "get", "e2e"))
    verdict = run.manifest.get("verdict") or {}
    name = str(verdict.get("verdict", "?"))
    cells = [
        ("text", run.workload), ("text", run.backend), ("text", run.world), (f"text {name}", name),
        ("", _number(put.get("ops_per_s"))), ("", _number(get.get("ops_per_s"))),
        ("", _latency(put, "p50_ns")), ("", _latency(put, "p99_ns")), ("", _latency(put, "p999_ns")),
        ("", _latency(e2e, "p50_ns")), ("", _latency(e2e, "p99_ns")),
        ("", _number(verdict.get("lost"))), ("", _number(verdict.get("duplicated"))),
        ("text", verdict.get("reason") or "-"),
    ]
    return "<tr>" + "".join(f'<td class="{_e(cls)}">{_e(text)}</td>' if cls else f"<td>{_e(text)}</td>"
                            for cls, text in cells) + "</tr>"


def _latencies(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(put, e2e) latencies in ns over the measured phases."""
    samples = read_samples(run.directory, columns=SAMPLE_COLUMNS)
    put = ok_ops(samples, "put", measured_only=True).column("latency_ns").to_numpy()
    return np.asarray(put), np.asarray(end_to_end_ns(samples, MEASURED_PHASES))


def _chart(workload: str, runs: list[Run]) -> str | None:
    """The workload's latency-by-percentile chart as a PNG data URI (None: nothing measured)."""
    from lab.present.plots import latency_figure

    put: dict[tuple[str, str], np.ndarray] = {}
    e2e: dict[tuple[str, str], np.ndarray] = {}
    for run in runs:
        key = (run.backend, run.world)
        if key in put:  # a second run of the same design and world: told apart by its folder
            key = (f"{run.backend} [{run.directory.name}]", run.world)
        put[key], e2e[key] = _latencies(run)
    panels = {title: series for title, series in (("put latency", put), ("end to end (put to delivery)", e2e))
              if any(v.size for v in series.values())}
    if not panels:
        return None
    figure = latency_figure(panels, title=f"{workload}: latency by percentile (measured phases)")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def render(runs: list[Run], made: datetime | None = None) -> str:
    """The report's HTML."""
    made = made or datetime.now(timezone.utc)
    title = "queue-lab report"
    parts = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        f"<title>{_e(title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">made {_e(made.strftime("%Y-%m-%d %H:%M:%S %Z"))} from {len(runs)} '
        f"run{'s' if len(runs) != 1 else ''}; rates and latencies over the measured phases "
        f"({_e(', '.join(MEASURED_PHASES))})</p>",
        "<h2>Runs</h2>", "<table>",
        "<tr>" + "".join(f"<th>{_e(c)}</th>" for c in COLUMNS) + "</tr>",
        *(_row(run) for run in runs),
        "</table>",
        "<h2>Latency by percentile</h2>",
    ]
    workloads: dict[str, list[Run]] = {}
    for run in runs:
        workloads.setdefault(run.workload, []).append(run)
    for workload, group in workloads.items():
        parts.append(f"<h3>{_e(workload)}</h3>")
        uri = _chart(workload, group)
        if uri is None:
            parts.append('<p class="muted">no measured latencies</p>')
        else:
            alt = f"{workload}: latency by percentile of " + ", ".join(sorted({r.backend for r in group}))
            parts.append(f'<img src="{uri}" alt="{_e(alt)}">')
    parts.append('<h2>Run folders</h2><ul>')
    parts.extend(f"<li>{_e(run.backend)} ({_e(run.world)}): {_e(run.directory)}</li>" for run in runs)
    parts += ["</ul>", "</body>", "</html>"]
    return "\n".join(parts) + "\n"


def write_report(paths: Iterable[str | Path], out: str | Path) -> Path:
    """Find the runs, render the report, write it to ``out``; NoRuns before anything is written."""
    runs = find_runs(paths)
    page = render(runs)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out
