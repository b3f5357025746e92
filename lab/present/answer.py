"""The answer in words: what a comparison's table says, as one paragraph a person can paste.

``compare_answer`` reads the rows of ``lab compare``'s table (one per workload, design and
world: the checker's counts, verdict and reason, and the measured phases' put latency) and
says, first and each alone, which runs broke their design's promises (the verdict of
``lab.judge.verdict``); then per workload which designs lost, duplicated or reordered
messages as their promises allow or within them, each design once with its count per world
and the explanation from the checker's reason (its count left out, the whole reason when it
does not parse); then per world the design that put fastest, naming only the workloads and
percentiles it did not win. Every figure is the table's, formatted as the table formats it,
so the words and the table cannot disagree. Plain sentences: no Markdown.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from lab.design.registry import CONTROL
from lab.judge.summary import format_ns
from lab.judge.findings import Verdict

#: the worlds a comparison runs in, in the order the answer names them
WORLDS = ("sim", "live")
Row = Mapping[str, Any]


def compare_answer(rows: Sequence[Row]) -> str:
    """The comparison's answer: delivery first, then the fastest puts per world, one paragraph."""
    if not rows:
        return "The comparison ran nothing, so there is no answer."
    return " ".join(delivery_sentences(rows) + speed_sentences(rows))


def delivery_sentences(rows: Sequence[Row]) -> list[str]:
    """Every broken promise alone and first, then per workload the losses, duplicates and other
    anomalies the promises allow or contain, each design once with both worlds, then the rest."""
    notable = [r for r in rows if r["lost"] or r["duplicated"] or r["verdict"] != Verdict.VALID]
    if not notable:
        if len(rows) == 1:
            return ["No design lost or duplicated an acknowledged message in the one run, and its verdict is valid."]
        return [f"No design lost or duplicated an acknowledged message in any of the {_count(len(rows), 'run')}, "
                "and every verdict is valid."]
    # a broken design is never one item of a list: its own sentence, the checker's whole reason
    said = [_broken(r) for r in notable if r["verdict"] == Verdict.INVALID]
    kept = [r for r in notable if r["verdict"] != Verdict.INVALID]
    for workload in dict.fromkeys(r["workload"] for r in kept):
        mine = [r for r in kept if r["workload"] == workload]
        for kind in KINDS:
            for verdict in (Verdict.ALLOWED, Verdict.VALID):
                group = [r for r in mine if _kind(r) == kind and r["verdict"] == verdict]
                if group:
                    said.append(_grouped(workload, kind, verdict, group))
    rest = len(rows) - len(notable)
    others = f"The other {'run' if rest == 1 else _count(rest, 'run')} lost and duplicated nothing" if rest else ""
    if any(r["verdict"] == Verdict.INVALID for r in rows):
        return said + ([others + "."] if others else [])
    return said + [f"{others}, and no run broke its design's promises." if others
                   else "No run broke its design's promises."]


def _broken(r: Row) -> str:
    reason = str(r.get("reason") or "").strip() or "no reason recorded"
    return (f"{r['backend']} broke its promises under {r['workload']} in the {r['world']} world "
            f"(verdict INVALID): {reason}.")


#: a kept run's main anomaly, in the order the answer names them: (its column, the verb, the noun)
KINDS = ("lost", "duplicated", "reordered", "other")
_VERBS = {"lost": "lost acknowledged messages", "duplicated": "delivered duplicates",
          "reordered": "delivered out of the real-time order", "other": "had anomalies"}
_NOUNS = {"lost": ("acknowledged message lost", "acknowledged messages lost"),
          "duplicated": ("duplicate delivery", "duplicate deliveries"),
          "reordered": ("inversion of the real-time order", "inversions of the real-time order")}
_ALLOW: dict[str, tuple[str, str]] = {Verdict.ALLOWED: ("as its promises allow", "each as its promises allow"),
                                      Verdict.VALID: ("within its promises", "each within its promises")}


def _kind(r: Row) -> str:
    if r["lost"]:
        return "lost"
    if r["duplicated"]:
        return "duplicated"
    return "reordered" if r.get("inversions") else "other"


def _grouped(workload: str, kind: str, verdict: str, rows: list[Row]) -> str:
    """One sentence: the designs of one workload whose runs share a main anomaly and a verdict."""
    designs = list(dict.fromkeys(r["backend"] for r in rows))
    clauses = [_design(kind, [r for r in rows if r["backend"] == d]) for d in designs]
    one, each = _ALLOW[verdict]
    if len(designs) == 1:
        return f"Under {workload}, {designs[0]} {_VERBS[kind]}, {one}: {clauses[0]}."
    return (f"Under {workload}, {_number(len(designs))} designs {_VERBS[kind]}, {each}: "
            + ", ".join(f"{d} {c}" for d, c in zip(designs, clauses)) + ".")


def _design(kind: str, rows: list[Row]) -> str:
    """One design's runs of one kind: the count per world, then why (once if every world says the same)."""
    rows = sorted(rows, key=lambda r: _world_rank(r["world"]))
    whys = [_why(kind, r) for r in rows]
    if len(set(whys)) == 1:
        return _counted(kind, rows) + _bracket([whys[0]] + _notes(kind, rows))
    return _and(_counted(kind, [r]) + _bracket([why] + _notes(kind, [r])) for r, why in zip(rows, whys))


def _counted(kind: str, rows: list[Row]) -> str:
    """The runs' main counts as the table has them, per world: "873 sim and 1,312 live"."""
    column = {"lost": "lost", "duplicated": "duplicated", "reordered": "inversions"}.get(kind)
    if column is None:  # no one count: the reason says it
        return _and(r["world"] for r in rows)
    counts = [int(r.get(column) or 0) for r in rows]
    said = _and(f"{n:,} {r['world']}" for n, r in zip(counts, rows))
    return said + (f" inversion{'' if counts == [1] else 's'}" if kind == "reordered" else "")


def _bracket(parts: list[str]) -> str:
    parts = [p for p in parts if p]
    return f" ({'; '.join(parts)})" if parts else ""


def _why(kind: str, r: Row) -> str:
    """The explanation of the run's main anomaly, its count left out: the reason's allowance or
    lease; the whole reason when it does not parse as the checker writes it."""
    items, _ = _items(r)
    if kind == "other" or not items:
        return str(r.get("reason") or "").strip()
    main = [(n, tail) for k, n, tail in items if k == kind]
    total = int(r.get({"reordered": "inversions"}.get(kind, kind)) or 0)
    if not main or sum(n for n, _ in main) != total:
        return str(r.get("reason") or "").strip()  # the counts do not add up: say it all
    tails = [_tail(tail, r["workload"]) for _, tail in main]
    return tails[0] if len(tails) == 1 else "; ".join(f"{n:,} {t}" for (n, _), t in zip(main, tails))


def _notes(kind: str, rows: list[Row]) -> list[str]:
    """The other anomalies the reasons name (reordering beside a loss, a failed get), merged
    across worlds when they say the same; nothing when a reason fell back whole."""
    merged: dict[tuple[str, str], list[tuple[str, int | None]]] = {}
    for r in rows:
        items, rest = _items(r)
        main = [n for k, n, _ in items if k == kind]
        if kind == "other" or not main or sum(main) != int(r.get({"reordered": "inversions"}.get(kind, kind)) or 0):
            continue  # its whole reason is already said
        for k, n, tail in items:
            if k != kind:
                merged.setdefault((k, tail), []).append((r["world"], n))
        for part in rest:
            merged.setdefault(("", part), []).append((r["world"], None))
    notes = []
    for (k, tail), counts in merged.items():
        if not k:
            notes.append(f"{tail} ({_and(w for w, _ in counts)})")
            continue
        one, many = _NOUNS[k]
        noun = one if len(counts) == 1 and counts[0][1] == 1 else many
        notes.append(_and(f"{n:,} {w}" for w, n in counts) + f" {noun}{_inline(tail)}")
    return notes


_PART = re.compile(r"; (?=(?:lost )?\d)")
_ITEM = {"lost": re.compile(r"^lost (\d+) acknowledged messages? (.+)$"),
         "duplicated": re.compile(r"^(\d+) duplicate deliver(?:y|ies) (.+)$"),
         "reordered": re.compile(r"^(\d+) inversions? of the real-time order (.+)$")}


def _items(r: Row) -> tuple[list[tuple[str, int, str]], list[str]]:
    """The reason's anomalies as (kind, count, explanation) and the parts that are none of them
    (``lab.judge.verdict.judge`` joins them with "; ")."""
    items, rest = [], []
    for part in _PART.split(str(r.get("reason") or "").strip()):
        for kind, pattern in _ITEM.items():
            if m := pattern.match(part):
                items.append((kind, int(m[1]), m[2]))
                break
        else:
            if part:
                rest.append(part)
    return items, rest


def _tail(tail: str, workload: str) -> str:
    """An explanation without the verdict's words: "under crash: allowed, fsync=never ..." in the
    crash workload is "fsync=never ..."; enclosing brackets dropped (the answer adds its own)."""
    if m := re.match(r"^under ([^:]+): allowed, (.+)$", tail):
        return m[2] if m[1] == workload else f"under {m[1]}: {m[2]}"
    if m := re.match(r"^(after [^:]+): allowed, (.+)$", tail):
        return f"{m[1]}: {m[2]}"
    return tail[1:-1] if tail.startswith("(") and tail.endswith(")") else tail


def _inline(tail: str) -> str:
    """A note's explanation inside the answer's brackets: "(no order promised)" as ", no order promised"."""
    return ", " + tail[1:-1] if tail.startswith("(") and tail.endswith(")") else " " + tail


def _world_rank(world: str) -> tuple[int, str]:
    return (WORLDS.index(world) if world in WORLDS else len(WORLDS), world)


def _number(n: int) -> str:
    words = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
    return words[n] if n < len(words) else f"{n:,}"


def speed_sentences(rows: Sequence[Row]) -> list[str]:
    """Per world, the design that put fastest (the control aside): one sentence naming only the
    workloads and percentiles it did not win; every workload's winners where no design leads."""
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
        workloads = list(dict.fromkeys(r["workload"] for r in contenders))
        slots = [(workload, name, *_lowest([r for r in contenders if r["workload"] == workload], column))
                 for workload in workloads for name, column in (("p50", "put_p50_ns"), ("p99", "put_p99_ns"))]
        slots = [s for s in slots if s[2] is not None]
        leader = _leader(slots) if len(workloads) > 1 else None
        if leader is None:  # one workload, or no design leads: each workload's winners
            clauses = [_fastest(w, [s for s in slots if s[0] == w]) for w in workloads]
            said.append(f"The fastest put in the {world} world{aside}: " + "; ".join(clauses) + ".")
        else:
            said.append(_led(world, leader, slots, aside))
    return said


Slot = tuple  # (workload, "p50" or "p99", lowest value, its text, the designs that show it)


def _leader(slots: list[Slot]) -> str | None:
    """The design that alone put fastest in more than half of the workloads' percentiles, if any."""
    alone = [s[4][0] for s in slots if len(s[4]) == 1]
    best = max(dict.fromkeys(alone), key=alone.count, default=None)
    return best if best is not None and 2 * alone.count(best) > len(slots) else None


def _led(world: str, leader: str, slots: list[Slot], aside: str) -> str:
    won = [s for s in slots if s[4] == [leader]]
    ranges = [f"{p} {_range([s[2] for s in won if s[1] == p])}" for p in ("p50", "p99") if any(s[1] == p for s in won)]
    lost = [s for s in slots if s[4] != [leader]]
    if not lost:
        return f"In the {world} world {leader} put fastest on every workload ({', '.join(ranges)}){aside}."
    exceptions = []
    for workload in dict.fromkeys(s[0] for s in lost):
        mine = [s for s in lost if s[0] == workload]
        if len(mine) == 2 and mine[0][4] == mine[1][4]:  # both percentiles to the same design(s)
            exceptions.append(f"{workload} ({_and(mine[0][4])}, "
                              + " and ".join(f"{p} {_shown(text, names)}" for _, p, _, text, names in mine) + ")")
        else:
            exceptions += [f"{p} of {workload} ({_and(names)}, {_shown(text, names)})" for _, p, _, text, names in mine]
    return (f"In the {world} world {leader} put fastest ({', '.join(ranges)}){aside}, "
            f"except {_and(exceptions)}.")


def _range(values: list[float]) -> str:
    """The lowest to the highest figure as the table prints them: "245–396 µs", "312 µs–1.71 ms"."""
    low, high = format_ns(min(values)), format_ns(max(values))
    if low == high:
        return low
    (a, unit), (b, unit_b) = low.rsplit(" ", 1), high.rsplit(" ", 1)
    return f"{a}–{b} {unit}" if unit == unit_b else f"{low}–{high}"


def _shown(text: str, names: list[str]) -> str:
    return f"{text} each" if len(names) > 1 else text


def _fastest(workload: str, slots: list[Slot]) -> str:
    by = {s[1]: s for s in slots}
    p50, p99 = by["p50"], by.get("p99")
    first = f"in {workload}, {_and(p50[4])} at p50 ({_shown(p50[3], p50[4])})"
    if p99 is None:
        return first
    if p99[4] == p50[4]:
        return f"{first} and at p99 ({_shown(p99[3], p99[4])})"
    return f"{first} and {_and(p99[4])} at p99 ({_shown(p99[3], p99[4])})"


def _lowest(rows: list[Row], column: str) -> tuple[float | None, str, list[str]]:
    """The lowest figure, as the table prints it, and every design that shows it (a tie)."""
    shown = [(format_ns(v), v, r["backend"]) for r in rows if (v := _figure(r, column)) is not None]
    if not shown:
        return None, "", []
    value, best = min((s[1], s[0]) for s in shown)
    return value, best, [name for text, _, name in shown if text == best]


def _figure(r: Row, column: str) -> float | None:
    value = r.get(column)
    return None if value is None or value != value else float(value)


def _and(words: Iterable[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _count(n: int, one: str) -> str:
    return f"{n:,} {one}{'' if n == 1 else 's'}"
