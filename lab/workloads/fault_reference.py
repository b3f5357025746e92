"""The fault kinds' reference page, generated from the registry (``lab.workloads.faults``): each
kind's doc (its class's docstring), its own fields with their defaults (read from the kind's
own parsing) and meanings (declared on the class, ``own_field``), an entry that parses, and the
worlds that apply it. The documentation site builds it (``lab.cli.reference``); a kind or
field without a meaning fails that build, so the page cannot fall behind the registry.
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

import yaml

from lab.workloads.fault_base import COMMON_FIELDS, ROLE_TARGETS, SHAPE_CUTS, Fault
from lab.workloads.faults import REGISTRY, kinds_in, parse_fault

#: What every entry's common fields mean.
COMMON_HELP = {
    "fault": "the kind: one of the sections below",
    "at": "seconds from the start of the run; or a range `[from, to]`: each run draws its time uniformly from "
          "it, from its seed and the fault's number, and its manifest and fault rows hold the drawn time",
    "duration": "seconds until it heals",
    "target": "whom it hits: one target or a list of them (below); default `servers`",
}
#: What the role targets name (besides a node's own name: ``s0``, ``p1``).
TARGET_HELP = {
    "servers": "every server",
    "server": "one server, drawn from the seed",
    "clients": "every client",
    "all": "servers and clients",
    "one": "one node of all",
    "minority": "a random minority of all ((n-1)//2)",
    "majority": "a random majority of all (n//2 + 1)",
}


class Undocumented(LookupError):
    """A kind or field of the registry that this page has no meaning for."""


def required(cls: type[Fault]) -> dict[str, Any]:
    """The fields a kind cannot do without, with the value its example entry gives them."""
    return {f.name: f.metadata["example"] for f in cls.own_fields() if f.metadata.get("example") is not None}


def defaults(cls: type[Fault]) -> dict[str, Any]:
    """The values a kind's own fields take when an entry leaves them out, as its parser sets them."""
    return cls.parse_fields({"fault": cls.kind, **required(cls)})


def example(cls: type[Fault]) -> dict[str, Any]:
    """A schedule entry of the kind, checked by the registry's own parser."""
    entry = {"fault": cls.kind, "at": 1.0, "duration": 0.5, "target": "servers", **required(cls)}
    parse_fault(dict(entry))
    return entry


def kind_section(cls: type[Fault], worlds: Sequence[str]) -> list[str]:
    """One kind's section: what it does, which of ``worlds`` apply it, its fields and an entry."""
    applied = [world for world in worlds if world in cls.worlds]
    doc = inspect.getdoc(cls) or ""
    if not doc or doc.startswith(f"{cls.__name__}("):  # a dataclass's made-up doc is its signature
        raise Undocumented(f"fault kind {cls.kind} ({cls.__module__}.{cls.__name__}) has no docstring")
    lines = [f"## {cls.kind}", "", " ".join(doc.split()), "",
             f"**Applied by:** {', '.join(f'the {w} world' for w in applied) or 'no world'}.", ""]
    fields = cls.own_fields()
    missing = [f.name for f in fields if not f.metadata.get("meaning")]
    if missing:
        raise Undocumented(f"fault kind {cls.kind}: no meaning for its field(s) {', '.join(missing)} "
                           f"(declare each with lab.workloads.fault_base.own_field)")
    if fields:
        values, needed = defaults(cls), required(cls)
        lines += ["| field | default | meaning |", "|---|---|---|"]
        for f in fields:
            shown = "required" if f.name in needed else f"`{_yaml(values.get(f.name))}`"
            lines.append(f"| `{f.name}` | {shown} | {_cell(f.metadata['meaning'])} |")
        lines.append("")
    else:
        lines += ["No fields of its own.", ""]
    if cls.kind == "partition":
        lines += ["| shape | cuts |", "|---|---|"]
        lines += [f"| `{shape}` | {_cell(cuts)} |" for shape, cuts in SHAPE_CUTS.items()]
        lines.append("")
    lines += ["```yaml", "faults:", *("  " + line for line in _entry_yaml(example(cls))), "```", ""]
    return lines


def markdown(worlds: Sequence[str]) -> str:
    """The whole page, with a column for each of ``worlds`` (the names of the worlds the lab runs)."""
    strange = next(((cls, w) for cls in REGISTRY.values() for w in cls.worlds if w not in worlds), None)
    if strange is not None:
        raise Undocumented(f"fault kind {strange[0].kind} names a world the lab does not run: {strange[1]!r} "
                           f"(worlds: {', '.join(worlds)})")
    lines = ["# Fault kinds", "",
             "Generated from the fault registry (`lab/workloads/faults.py`, `fault_kinds.py`: each kind's class "
             "names the worlds that apply it) when the site is built, so it lists exactly the kinds, fields and defaults of this "
             "version. A workload's `faults:` is a list of entries; a field another kind uses is refused, by name, "
             "and a kind the chosen world cannot apply is refused before the run starts.", "",
             "| kind | " + " | ".join(worlds) + " |", "|---|" + "---|" * len(worlds)]
    applied = {world: kinds_in(world) for world in worlds}
    for kind in REGISTRY:
        marks = " | ".join("yes" if kind in applied[world] else "—" for world in worlds)
        lines.append(f"| [{kind}](#{kind}) | {marks} |")
    lines += ["", "## Every entry", "", "| field | meaning |", "|---|---|"]
    lines += [f"| `{name}` | {_cell(COMMON_HELP[name])} |" for name in COMMON_FIELDS]
    lines += ["", "Targets are functions of the run's nodes; every random pick is drawn from the run's seed and "
              "the fault's number, so the same seed gives the same nodes and adding a fault does not move the "
              "others.", "", "| target | names |", "|---|---|"]
    lines += [f"| `{name}` | {_cell(TARGET_HELP[name])} |" for name in ROLE_TARGETS]
    lines += ["| a node's name (`s0`, `p1`) | that node |", "",
              "Faults compose: two overlapping partitions each mend only the links they cut; two pauses of one "
              "node (a `pause` and a `gc` pause among them) end when both have.", ""]
    for cls in REGISTRY.values():
        lines += kind_section(cls, worlds)
    return "\n".join(lines)


def _entry_yaml(entry: dict[str, Any]) -> list[str]:
    text = yaml.safe_dump([entry], sort_keys=False, default_flow_style=False).splitlines()
    return text


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).splitlines()[0].removesuffix(" ...").strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
