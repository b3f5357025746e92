"""The answer in words: what a comparison's table says, as one paragraph a person can paste.

``compare_answer`` reads the rows of ``lab compare``'s table (one per workload, design and
world: the checker's counts, verdict and reason, and the measured phases' put latency) and
says which designs lost or duplicated acknowledged messages, where, and whether their
promises allow it (the verdict of ``lab.judge.verdict``), then which design put fastest at
p50 and at p99 in each world. Every figure is the table's, formatted as the table formats
it, so the words and the table cannot disagree. Plain sentences: no Markdown.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from lab.design.registry import CONTROL
from lab.judge.summary import format_ns
from lab.judge.verdict import ALLOWED, INVALID, VALID

#: the worlds a comparison runs in, in the order the answer names them
WORLDS = ("sim", "live")
#: what each verdict means for the anomalies named before it
VERDICT_WORDS = {
    VALID: "within its promises (verdict valid",
    ALLOWED: "which its promises allow under that fault (verdict allowed",
    INVALID: "which breaks its promises (verdict INVALID",
}
Row = Mapping[str, Any]


def compare_answer(rows: Sequence[Row]) -> str:
    """The comparison's answer: delivery first, then the fastest puts per world, one paragraph."""
    if not rows:
        return "The comparison ran nothing, so there is no answer."
    return " ".join(delivery_sentences(rows) + speed_sentences(rows))


def delivery_sentences(rows: Sequence[Row]) -> list[str]:
    """A sentence per run that lost, duplicated or was not plainly valid, then what the rest did."""
    notable = [r for r in rows if r["lost"] or r["duplicated"] or r["verdict"] != VALID]
    if not notable:
        if len(rows) == 1:
            return ["No design lost or duplicated an acknowledged message in the one run, and its verdict is valid."]
        return [f"No design lost or duplicated an acknowledged message in any of the {_count(len(rows), 'run')}, "
                "and every verdict is valid."]
    said = [_delivery(r) for r in notable]
    rest = len(rows) - len(notable)
    if rest:
        said.append(f"The other {'run' if rest == 1 else _count(rest, 'run')} lost and duplicated nothing.")
    if not any(r["verdict"] == INVALID for r in rows):
        said.append("No run broke its design's promises.")
    return said


def _delivery(r: Row) -> str:
    what = []
    if r["lost"]:
        what.append(f"lost {_count(r['lost'], 'acknowledged message')}")
    if r["duplicated"]:
        what.append(f"delivered {_count(r['duplicated'], 'duplicate')}")
    if r.get("unexpected"):
        what.append(f"delivered {_count(r['unexpected'], 'message')} never sent")
    did = _and(what) if what else "lost and duplicated nothing"
    # the checker's reason names the fault and the allowance (or the broken promise): the why
    reason = str(r.get("reason") or "").strip()
    return (f"In {r['workload']}, {r['backend']} ({r['world']} world) {did}, "
            f"{VERDICT_WORDS[r['verdict']]}{': ' + reason if reason else ''}).")


def speed_sentences(rows: Sequence[Row]) -> list[str]:
    """Per world, per workload: the design with the lowest put p50 and p99 (the control aside)."""
    said = []
    for world in WORLDS + tuple(sorted({r["world"] for r in rows} - set(WORLDS))):
        mine = [r for r in rows if r["world"] == world]
        if not mine:
            said.append(f"Nothing ran in the {world} world.")
            continue
        timed = [r for r in mine if _figure(r, "put_p50_ns") is not None]
        if not timed:
            said.append(f"No put completed in the {world} world's measured phases.")
            continue
        # the control (an in-memory FIFO, no disk, no replicas) is the floor, not a contender
        contenders = [r for r in timed if r["backend"] != CONTROL] or timed
        aside = f", the control {CONTROL} aside" if len(contenders) < len(timed) else ""
        clauses = [_fastest(workload, [r for r in contenders if r["workload"] == workload])
                   for workload in dict.fromkeys(r["workload"] for r in contenders)]
        said.append(f"The fastest put in the {world} world{aside}: " + "; ".join(clauses) + ".")
    return said


def _fastest(workload: str, rows: list[Row]) -> str:
    p50, p50_names = _lowest(rows, "put_p50_ns")
    p99, p99_names = _lowest(rows, "put_p99_ns")
    if p99 is None:
        return f"in {workload}, {p50_names} at p50 ({p50})"
    if p99_names == p50_names:
        return f"in {workload}, {p50_names} at p50 ({p50}) and at p99 ({p99})"
    return f"in {workload}, {p50_names} at p50 ({p50}) and {p99_names} at p99 ({p99})"


def _lowest(rows: list[Row], column: str) -> tuple[str | None, str]:
    """The lowest figure as the table prints it, and every design that shows it (a tie)."""
    shown = [(format_ns(v), v, r["backend"]) for r in rows if (v := _figure(r, column)) is not None]
    if not shown:
        return None, ""
    best = min(shown, key=lambda s: s[1])[0]
    names = [name for text, _, name in shown if text == best]
    return (f"{best} each" if len(names) > 1 else best), _and(names)


def _figure(r: Row, column: str) -> float | None:
    value = r.get(column)
    return None if value is None or value != value else float(value)


def _and(words: Iterable[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _count(n: int, one: str) -> str:
    return f"{n:,} {one}{'' if n == 1 else 's'}"
