"""`lab figures` (`make figures`): the documentation's figures made from runs, never pasted by
hand. Each figure is one experiment of the lab (``lab compare``, ``lab matrix``, ``lab brokers``)
run into its own folder; its outputs are copied to the docs folder under the names the pages
link, and ``figures.json`` beside them names, for each file, the command that made it, when,
and how long it took — the pages' captions quote it.

A quick set (``quick=True``: one design, one scenario, one seed, a short workload) checks the
plumbing in seconds rather than the full half hour and more; its stamp says so.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from lab.design.registry import CONTROL, ORDER, peers

#: The stamp file beside the figures.
STAMP = "figures.json"

def quick_peer() -> str:
    """The broker of the quick brokers figure: the first installed peer in the lab's order
    (the lab's own peers come first; the first of them starts in well under a second)."""
    installed = peers()
    return min(installed, key=lambda name: ORDER.index(name) if name in ORDER else len(ORDER))


@dataclass(frozen=True)
class Figure:
    """One experiment and the docs files it makes."""

    name: str
    command: str  # the `lab` command line of the same runs
    files: tuple[str, ...]  # the docs files it writes, by name
    make: Callable[[Path, bool, Callable[[str], None]], dict[str, Path]]  # (folder, quick, echo) -> {file: made}
    quick_command: str = ""
    about: str = field(default="", compare=False)


def _compare(folder: Path, quick: bool, echo: Callable[[str], None]) -> dict[str, Path]:
    from lab.experiments.compare import compare, standard_workloads
    from lab.experiments.figures_compare import compare_designs
    from lab.workloads.spec import load_workload

    workloads = [load_workload("steady").scaled(0.1)] if quick else standard_workloads()
    comparison = compare([CONTROL] if quick else None, ["sim"] if quick else ["sim", "live"], workloads,
                         out=folder, progress=not quick, echo=echo)
    png = folder / "compare-designs.png"
    compare_designs(comparison.directory, [w.name for w in workloads], png)
    return {"compare-designs.png": png}


def _matrix(folder: Path, quick: bool, echo: Callable[[str], None]) -> dict[str, Path]:
    from lab.experiments.matrix import run_matrix

    matrix = run_matrix([CONTROL] if quick else None, ["kill"] if quick else None, 1 if quick else 5, out=folder,
                        progress=not quick, echo=echo)
    return {"matrix-heatmap.png": matrix.heatmap_path}


def _brokers(folder: Path, quick: bool, echo: Callable[[str], None]) -> dict[str, Path]:
    from lab.experiments.brokers import WORKLOADS, markdown, run_brokers, table

    matrix = run_brokers([quick_peer()] if quick else None, [] if quick else None, ["steady"] if quick else WORKLOADS,
                         out=folder, progress=not quick, echo=echo)
    page = folder / "brokers-table.md"
    page.write_text(markdown(table(matrix.rows)) + "\n")
    return {"brokers-heatmap.png": matrix.heatmap_path, "brokers-table.md": page}


#: Every figure, in the order `lab figures` makes them (quickest first).
FIGURES: dict[str, Figure] = {figure.name: figure for figure in (
    Figure("compare", "lab compare", ("compare-designs.png",), _compare,
           f"lab compare --backends {CONTROL} --worlds sim --workloads steady (scaled 0.1)"),
    Figure("matrix", "lab matrix", ("matrix-heatmap.png",), _matrix,
           f"lab matrix --backends {CONTROL} --scenarios kill --seeds 1"),
    Figure("brokers", "lab brokers", ("brokers-heatmap.png", "brokers-table.md"), _brokers,
           "lab brokers --brokers {peer} --designs '' --workloads steady"),
)}


def _shown(path: Path) -> str:
    """``path`` relative to the working folder when it is below it: the stamp is committed,
    and a checkout's absolute path means nothing on another machine."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def make_figures(names: list[str], docs: Path, work: Path, quick: bool = False,
                 echo: Callable[[str], None] = print, made_by: str = "lab figures") -> dict[str, dict[str, Any]]:
    """Make the figures ``names`` (keys of FIGURES): each experiment runs in ``work/<name>``,
    its files are copied into ``docs`` and stamped in ``docs/figures.json`` as soon as it ends
    (so Ctrl-C keeps what was finished). Returns the stamps written."""
    unknown = [name for name in names if name not in FIGURES]
    if unknown:
        raise ValueError(f"unknown figure(s) {', '.join(unknown)}: choose from {', '.join(FIGURES)}")
    docs.mkdir(parents=True, exist_ok=True)
    written: dict[str, dict[str, Any]] = {}
    for number, name in enumerate(names, start=1):
        figure = FIGURES[name]
        # {peer}: the quick broker, looked up when it runs (a peer may be missing)
        command = figure.quick_command.format(peer=quick_peer()) if quick else figure.command
        echo(f"[{number}/{len(names)}] {name}: {command} -> {', '.join(figure.files)}")
        started, clock = datetime.now(timezone.utc), time.monotonic()
        made = figure.make(work / name, quick, echo)
        seconds = time.monotonic() - clock
        stamp = {"command": command, "made_by": made_by, "quick": quick, "date": started.date().isoformat(),
                 "started": started.isoformat(timespec="seconds"), "seconds": round(seconds, 1),
                 "runs": _shown(work / name)}
        for file in figure.files:
            target = docs / file
            if file.endswith(".md"):
                target.write_text(_page(file, made[file].read_text(), stamp))
            else:
                shutil.copyfile(made[file], target)
            written[file] = stamp
        _write_stamps(docs / STAMP, {file: stamp for file in figure.files})
        echo(f"  made {', '.join(str(docs / f) for f in figure.files)} in {_duration(seconds)}")
    return written


def read_stamps(path: Path) -> dict[str, dict[str, Any]]:
    """The stamps of ``figures.json`` (nothing if there is none yet)."""
    return json.loads(path.read_text()) if path.exists() else {}


def caption(stamp: dict[str, Any]) -> str:
    """The line a page quotes under a figure: the command and date that made it."""
    quick = " (the quick set: not the real figure)" if stamp.get("quick") else ""
    return f"made by `{stamp['command']}` on {stamp['date']} in {_duration(stamp['seconds'])}{quick}"


def _write_stamps(path: Path, new: dict[str, dict[str, Any]]) -> None:
    stamps = {**read_stamps(path), **new}
    path.write_text(json.dumps(dict(sorted(stamps.items())), indent=2) + "\n")


def _page(file: str, table: str, stamp: dict[str, Any]) -> str:
    """A generated Markdown figure as a page: its title, where it came from, the table."""
    title = {"brokers-table.md": "The real brokers' full table"}.get(file, file)
    line = caption(stamp)
    return f"# {title}\n\n{line[0].upper()}{line[1:]} (`{stamp['made_by']}`).\n\n{table}"


def _duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{seconds:.1f} s"
