"""Verdict charts: verdicts as coloured cells (valid green, allowed amber, invalid red, no
evidence grey).

``verdict_grid`` draws the cells with their numbers on an axis (the compare figure's grid and
the notebooks'); ``verdict_heatmap`` is a figure of one grid and its legend, ``lab matrix``'s
heat map.
"""

from __future__ import annotations

import math
from typing import Mapping

from matplotlib.figure import Figure

from lab.judge.findings import Verdict

VERDICT_COLOURS = {Verdict.VALID: "#4caf50", Verdict.ALLOWED: "#ffb300", Verdict.INVALID: "#e53935",
                   Verdict.NO_EVIDENCE: "#9e9e9e"}
#: keyed by text: a Verdict is its text (a StrEnum), so a manifest's "valid" finds its level
VERDICT_LEVEL: dict[str, int] = {verdict: level for level, verdict in enumerate(VERDICT_COLOURS)}


def verdict_grid(ax, cells: Mapping[tuple[str, str], tuple[str, str]], title: str | None = None) -> None:
    """On ``ax``: ``cells`` maps (row, column) to (verdict, text); rows and columns in
    first-seen order; each cell coloured by its verdict (valid green, allowed amber,
    invalid red, no evidence grey; no cell: blank, marked "not run") with its text on it."""
    from matplotlib.colors import ListedColormap

    columns = list(dict.fromkeys(c for _, c in cells))
    labels = list(dict.fromkeys(r for r, _ in cells))
    grid = [[VERDICT_LEVEL[cells[(r, c)][0]] if (r, c) in cells else math.nan for c in columns] for r in labels]
    ax.imshow(grid, cmap=ListedColormap(list(VERDICT_COLOURS.values())), vmin=0, vmax=len(VERDICT_COLOURS) - 1,
              aspect="auto")
    for i, label in enumerate(labels):
        for j, column in enumerate(columns):
            cell = cells.get((label, column))
            if cell is not None:
                ax.text(j, i, cell[1], ha="center", va="center", fontsize=7)
            else:  # a combination that did not run (a fault schedule live on the in-process control)
                ax.text(j, i, "not run", ha="center", va="center", fontsize=7, color="grey")
    ax.set_xticks(range(len(columns)), columns, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)


def verdict_legend(figure: Figure) -> None:
    from matplotlib.patches import Patch

    figure.legend(handles=[Patch(color=c, label=v) for v, c in VERDICT_COLOURS.items()], loc="outside lower center",
                  ncols=len(VERDICT_COLOURS), fontsize=8)


def verdict_heatmap(cells: Mapping[tuple[str, str], tuple[str, str]], *, title: str, path=None) -> Figure:
    """A figure of one ``verdict_grid`` and a legend of its colours: ``lab matrix``'s heat
    map (rows: designs and options, columns: scenarios) and the notebooks' verdict grids.
    Saved as PNG at ``path`` (120 dpi) if given."""
    columns = set(c for _, c in cells)
    labels = set(r for r, _ in cells)
    figure = Figure(figsize=(max(6.0, 2.5 + 0.8 * len(columns)), 1.6 + 0.45 * len(labels)), layout="constrained")
    verdict_grid(figure.subplots(), cells, title)
    verdict_legend(figure)
    if path is not None:
        figure.savefig(path, dpi=120)
    return figure
