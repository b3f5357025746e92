"""A run's operations against time, one row per client, as self-contained HTML: the
presentation room's timeline, in the manner of Jepsen's timeline checker.

Each operation is a bar from its start to its end, coloured by outcome (ok, fail, info);
each fault is a shaded band over every row from its start to its heal, named with the
nodes it struck. The page is an inline SVG with its own style: nothing is fetched. A big
run is cut to ``MAX_OPS`` operations per client (its first ones), and the page says how
many were left out, so that a browser can open it.
"""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import pyarrow as pa

from lab.history.phases import HEAL, START, fault_events
from lab.history.record import FAULT_OP, mask, read_samples

MAX_OPS = 2000  # per client: an SVG of a few thousand rects opens in any browser
COLOURS = {"ok": "#2da44e", "fail": "#cf222e", "info": "#bf8700"}
ROW, WIDTH, LEFT = 22, 1200, 90  # px: one client's row, the plot's width, the names' column


def render(samples: pa.Table, title: str) -> str:
    """The timeline page of one run's samples."""
    is_op = ~mask(samples, "op", FAULT_OP)
    ops = samples.filter(pa.array(is_op)).select(["client", "op", "msg_id", "t_start_ns", "latency_ns", "outcome"])
    start = ops.column("t_start_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    end = start + ops.column("latency_ns").to_numpy(zero_copy_only=False).astype(np.int64)
    events = fault_events(samples)
    instants = [e.t_ns for e in events] + ([int(start.min()), int(end.max())] if len(start) else [])
    t0, t1 = (min(instants), max(instants)) if instants else (0, 1)
    span = max(t1 - t0, 1)

    def x(t: int) -> float:
        return LEFT + (t - t0) / span * WIDTH

    clients = sorted(set(ops.column("client").to_pylist()))
    row_of = {c: i for i, c in enumerate(clients)}
    height = ROW * len(clients) + 40
    parts: list[str] = []
    heals = {e.number: e.t_ns for e in events if e.event == HEAL}
    for e in events:  # the bands first: the bars stand on them
        if e.event != START:
            continue
        a, b = x(e.t_ns), x(heals.get(e.number, t1))
        label = f"{e.kind} on {', '.join(e.nodes) or 'no node'}"
        parts.append(f'<rect class="fault" x="{a:.1f}" y="0" width="{max(b - a, 1):.1f}" height="{height - 30}">'
                     f"<title>{html.escape(label)}</title></rect>"
                     f'<text class="fault" x="{a + 2:.1f}" y="{height - 18}">{html.escape(label)}</text>')
    shown = {c: 0 for c in clients}
    cut = {c: 0 for c in clients}
    for client, op, msg_id, s, e2, outcome in zip(ops.column("client").to_pylist(), ops.column("op").to_pylist(),
                                                    ops.column("msg_id").to_pylist(), start.tolist(), end.tolist(),
                                                    ops.column("outcome").to_pylist()):
        if shown[client] >= MAX_OPS:
            cut[client] += 1
            continue
        shown[client] += 1
        a, b = x(s), x(e2)
        tip = f"{op} {msg_id or ''} {outcome} {(s - t0) / 1e9:.3f}s +{(e2 - s) / 1e6:.2f} ms"
        parts.append(f'<rect x="{a:.1f}" y="{row_of[client] * ROW + 3}" width="{max(b - a, 0.5):.1f}" '
                     f'height="{ROW - 6}" fill="{COLOURS.get(outcome, "#888")}"><title>{html.escape(tip)}</title></rect>')
    for c, i in row_of.items():
        parts.append(f'<text x="4" y="{i * ROW + ROW - 7}">{html.escape(c)}</text>')
    parts.append(f'<text x="{LEFT}" y="{height - 4}">0 s</text>'
                 f'<text x="{LEFT + WIDTH - 40}" y="{height - 4}">{span / 1e9:.3f} s</text>')
    left_out = {c: n for c, n in cut.items() if n}
    note = ("; ".join(f"client {html.escape(c)}: its first {MAX_OPS} operations shown, {n} later ones cut"
                      for c, n in left_out.items()) or "every operation shown")
    legend = " ".join(f'<span style="color:{colour}">&#9632; {name}</span>' for name, colour in COLOURS.items())
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', '<head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:1em} text{font-size:11px} rect.fault{fill:#999;opacity:.25}"
        " text.fault{fill:#555}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>operations per client against time; {legend}; shaded: faults. {note}.</p>",
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 20}" height="{height}">',
        *parts, "</svg>", "</body></html>", ""])


def write(run_dir: Path, out: Path, title: str) -> Path:
    """Render a run folder's timeline to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(read_samples(run_dir), title), encoding="utf-8")
    return out
