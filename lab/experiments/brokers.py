"""`lab brokers` and notebook 09: the real brokers beside the designs, in the live world —
every peer under each of its durability settings (``Backend.promised.option_sets``) and the
designs' own option sets, under no fault, a burst, a pause, a split, a power loss and a
kill -9; the verdict against each one's own promises, what was lost, duplicated and
reordered, and put and end-to-end latency; then the answer in words, written from the
table (never by hand).

The runs are ``lab matrix --world live`` cells (one run at a time: live runs side by side
would time each other); this module picks the cells, shapes the table and writes the words.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from lab.design.registry import CONTROL, is_peer, own, peers

if TYPE_CHECKING:
    from lab.experiments.matrix import Matrix
# The matrix and the summary's formatting (pandas, pyarrow, the runner) are imported where they
# are used: `lab`'s parser reads WORKLOADS, and every `lab` command, `lab serve` included (once
# per server start), builds that parser.

#: the faults of the question: none, a burst of reliable reads, a pause, a split, power loss, kill -9
WORKLOADS = ("steady", "burst-reliable", "gc-pause", "net-split", "crash", "kill")
LATENCIES = (("put", "p50_ns", "put p50"), ("put", "p99_ns", "put p99"), ("put", "p999_ns", "put p99.9"),
             ("e2e", "p50_ns", "e2e p50"), ("e2e", "p99_ns", "e2e p99"), ("e2e", "p999_ns", "e2e p99.9"))
COLUMNS = ("kind", "name", "setting", "workload", "verdict", "lost", "duplicated", "inversions",
           *(label for _op, _q, label in LATENCIES), "reason")


def designs() -> list[str]:
    """The designs beside the brokers: the lab's own, not the in-memory control."""
    return [name for name in own() if name != CONTROL]


def run_brokers(brokers: Iterable[str] | None = None, beside: Iterable[str] | None = None,
                workloads: Iterable[str] = WORKLOADS, seeds: int = 1, out: str | Path | None = None,
                progress: bool = True, echo: Callable[[str], None] = print) -> Matrix:
    """Every broker (default: every peer installed) and design (default: ``designs()``)
    under every workload, live."""
    from lab.experiments.matrix import run_matrix

    chosen = list(brokers) if brokers is not None else peers()
    chosen += list(beside) if beside is not None else designs()
    return run_matrix(chosen, list(workloads), seeds, out=out, progress=progress, echo=echo, world="live")


def table(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The matrix's rows as the brokers' table: who (a broker or a design), with which
    setting, under which workload; the verdict and the counts; latency in the steady phase
    (before any fault), where the designs and brokers are compared on equal terms."""
    out = []
    for row in rows:
        line = {"kind": "broker" if is_peer(row["backend"]) else "design", "name": row["backend"],
                "setting": row["options"] or "defaults", "workload": row["scenario"], "verdict": row["verdict"],
                "lost": int(row["lost"]), "duplicated": int(row["duplicated"]), "inversions": int(row["inversions"]),
                "reason": row["reason"]}
        for op, quantile, label in LATENCIES:
            value = row.get(f"{op}_steady_{quantile}")
            line[label] = None if value in (None, "") or value != value else float(value)
        out.append(line)
    return out


def markdown(lines: list[dict[str, Any]]) -> str:
    """The table as Markdown (docs/brokers-table.md, notebook 09, `lab brokers`)."""
    from lab.judge.summary import format_ns

    head = [c for c in COLUMNS if c not in ("kind", "reason")]
    text = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for line in lines:
        cells = [format_ns(line[c]) if c.startswith(("put ", "e2e ")) and line[c] is not None else
                 "-" if line[c] is None else str(line[c]) for c in head]
        text.append("| " + " | ".join(cells) + " |")
    return "\n".join(text)


def grid(lines: list[dict[str, Any]]) -> str:
    """One row per broker or design and setting: the verdict and lost/duplicated under each
    workload, then put and end-to-end p50 / p99 with no fault (the steady workload)."""
    from lab.judge.summary import format_ns

    workloads = list(dict.fromkeys(line["workload"] for line in lines))
    rows: dict[str, dict[str, Any]] = {}
    for line in lines:
        row = rows.setdefault(_who(line), {})
        row[line["workload"]] = f"{line['verdict']} {line['lost']}/{line['duplicated']}"
        if line["workload"] == "steady":
            row["steady put"] = " / ".join(format_ns(line[q]) if line[q] is not None else "-" for q in ("put p50", "put p99"))
            row["steady e2e"] = " / ".join(format_ns(line[q]) if line[q] is not None else "-" for q in ("e2e p50", "e2e p99"))
    head = [*workloads, "steady put p50 / p99", "steady e2e p50 / p99"]
    text = ["| | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for who, row in rows.items():
        cells = [row.get(w, "-") for w in workloads] + [row.get("steady put", "-"), row.get("steady e2e", "-")]
        text.append(f"| {who} | " + " | ".join(cells) + " |")
    return "\n".join(text)


def _who(line: Mapping[str, Any]) -> str:
    return line["name"] if line["setting"] == "defaults" else f"{line['name']} {line['setting']}"


def _names(lines: Iterable[Mapping[str, Any]]) -> str:
    names = sorted({_who(line) for line in lines})
    return ", ".join(names) if names else "none"


def answer(lines: list[dict[str, Any]]) -> str:
    """Two or three sentences of what the table shows, from its figures."""
    from lab.judge.summary import format_ns

    brokers = [line for line in lines if line["kind"] == "broker"]
    said = []
    invalid = [line for line in lines if line["verdict"] == "invalid"]
    if invalid:
        said.append("Broken promises (INVALID): " + "; ".join(f"{_who(line)} under {line['workload']} ({line['reason']})"
                                                          for line in invalid) + ".")
    crash = [line for line in brokers if line["workload"] == "crash"]
    if crash:
        lossy = [line for line in crash if line["lost"] > 0]
        said.append(f"Under a power loss the brokers that lost acknowledged messages were {_names(lossy)}"
                    f"{' — each as its own setting allows' if lossy and all(line['verdict'] == 'allowed' for line in lossy) else ''}"
                    f"; {_names(line for line in crash if line['lost'] == 0)} lost none.")
    kill = [line for line in brokers if line["workload"] == "kill"]
    if kill:
        lossy = [line for line in kill if line["lost"] > 0]
        duplicated = [line for line in kill if line["duplicated"] > 0]
        said.append("A kill -9 (the page cache kept) lost "
                    + (f"acknowledged messages on {_names(lossy)} only" if lossy else "nothing on any broker")
                    + (f"; {_names(duplicated)} delivered some twice" if duplicated else "") + ".")
    steady = [line for line in lines if line["workload"] == "steady" and line["put p50"] is not None]
    if steady:
        fastest = min(steady, key=lambda line: line["put p50"])
        tail = min(steady, key=lambda line: line["put p99"] if line["put p99"] is not None else float("inf"))
        said.append(f"With no fault the fastest put at p50 was {_who(fastest)} ({format_ns(fastest['put p50'])}), "
                    f"and at p99 {_who(tail)} ({format_ns(tail['put p99'])}).")
    return " ".join(said) if said else "No runs."
