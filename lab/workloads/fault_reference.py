"""The fault kinds' reference page, generated from the registry (``lab.workloads.faults``): each
kind's doc, its own fields with their defaults (read from the kind's own parsing) and meaning,
an entry that parses, and the worlds that apply it. The documentation site builds it
(``lab.cli.reference``); a kind or field without a meaning here fails that build, so the
page cannot fall behind the registry.
"""

from __future__ import annotations

import inspect
from typing import Any, Mapping

import yaml

from lab.workloads.fault_base import COMMON_FIELDS, ROLE_TARGETS, SHAPES, SIDED_SHAPES, Fault
from lab.workloads.fault_kinds import GC_FIELDS, GC_PRESETS
from lab.workloads.faults import REGISTRY, parse_fault

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
#: A partition's shapes.
SHAPE_HELP = {
    "isolate": "the targets from every other node",
    "one": "one target from the other targets",
    "minority": "a random minority of the targets ((n-1)//2) from the rest",
    "majority": "the targets in two random halves, the smaller one first",
    "halves": "the targets in two random halves, the smaller one first",
    "majorities-ring": "every target still sees a majority, no two the same one",
    "bridge": "two halves, and one target that talks to both",
    "clients": "every client from every server (takes no target)",
}
#: Each kind's own fields: what they mean.
FIELD_HELP: dict[str, dict[str, str]] = {
    "crash": {"tear": "a random prefix of each file's unsynced tail survives the crash"},
    "partition": {
        "shape": "which links are cut: " + ", ".join(f"`{s}`" for s in SHAPES) + " (the shapes below)",
        "mode": "`isolate`: both ways; `one-way-in` / `one-way-out`: only the messages into / out of the cut-off "
                "side (shapes with one: " + ", ".join(SIDED_SHAPES) + ")",
        "flap": "seconds: the cut switches off and on every `flap` seconds while the fault lasts (0: it holds)",
    },
    "link-delay": {"ms": "milliseconds added to every message on the links", "jitter_ms": "plus a uniform 0 to "
                   "`jitter_ms` more, per message"},
    "loss": {"p": "the probability that each message on the links is dropped, in (0, 1]"},
    "disk-delay": {"ms": "milliseconds added to each fsync"},
    "gc": {"preset": "the defaults of the fields below: " + "; ".join(
        f"`{name}`: " + ", ".join(f"{k} {v:g}" for k, v in values.items()) for name, values in GC_PRESETS.items()),
           **GC_FIELDS},
    "late-writes": {"late_p": "the probability that a write is applied and answered `late_s` later",
                    "late_s": "seconds a late write lands after it was sent (> 0)",
                    "ghost_p": "the probability that a write is never applied nor answered (a ghost); "
                               "`late_p + ghost_p` in (0, 1]"},
}
#: The fields a kind cannot do without, with the value its example entry gives them.
REQUIRED: dict[str, dict[str, Any]] = {"link-delay": {"ms": 50}, "loss": {"p": 0.1}, "disk-delay": {"ms": 20}}


class Undocumented(LookupError):
    """A kind or field of the registry that this page has no meaning for."""


def defaults(cls: type[Fault]) -> dict[str, Any]:
    """The values a kind's own fields take when an entry leaves them out, as its parser sets them."""
    return cls.parse_fields({"fault": cls.kind, **REQUIRED.get(cls.kind, {})})


def example(cls: type[Fault]) -> dict[str, Any]:
    """A schedule entry of the kind, checked by the registry's own parser."""
    entry = {"fault": cls.kind, "at": 1.0, "duration": 0.5, "target": "servers", **REQUIRED.get(cls.kind, {})}
    parse_fault(dict(entry))
    return entry


def kind_section(cls: type[Fault], worlds: Mapping[str, tuple[str, ...]]) -> list[str]:
    """One kind's section: what it does, who applies it, its fields and an entry."""
    applied = [world for world, kinds in worlds.items() if cls.kind in kinds]
    doc = inspect.getdoc(cls) or ""
    if not doc or doc.startswith(f"{cls.__name__}("):  # a dataclass's made-up doc is its signature
        raise Undocumented(f"fault kind {cls.kind} ({cls.__module__}.{cls.__name__}) has no docstring")
    lines = [f"## {cls.kind}", "", " ".join(doc.split()), "",
             f"**Applied by:** {', '.join(f'the {w} world' for w in applied) or 'no world'}.", ""]
    helps = FIELD_HELP.get(cls.kind, {})
    missing = [name for name in cls.FIELDS if name not in helps]
    if missing:
        raise Undocumented(f"fault kind {cls.kind}: no meaning for its field(s) {', '.join(missing)} "
                           f"(lab/workloads/fault_reference.py FIELD_HELP)")
    if cls.FIELDS:
        values = defaults(cls)
        lines += ["| field | default | meaning |", "|---|---|---|"]
        for name in cls.FIELDS:
            shown = "required" if name in REQUIRED.get(cls.kind, {}) else f"`{_yaml(values.get(name))}`"
            lines.append(f"| `{name}` | {shown} | {_cell(helps[name])} |")
        lines.append("")
    else:
        lines += ["No fields of its own.", ""]
    if cls.kind == "partition":
        lines += ["| shape | cuts |", "|---|---|"]
        lines += [f"| `{shape}` | {_cell(SHAPE_HELP[shape])} |" for shape in SHAPES]
        lines.append("")
    lines += ["```yaml", "faults:", *("  " + line for line in _entry_yaml(example(cls))), "```", ""]
    return lines


def markdown(worlds: Mapping[str, tuple[str, ...]]) -> str:
    """The whole page; ``worlds`` maps each world's name to the kinds it applies (its class's ``fault_kinds``)."""
    unknown = sorted({kind for kinds in worlds.values() for kind in kinds} - set(REGISTRY))
    if unknown:
        raise Undocumented(f"worlds apply fault kinds the registry does not know: {', '.join(unknown)}")
    lines = ["# Fault kinds", "",
             "Generated from the fault registry (`lab/workloads/faults.py`, `fault_kinds.py`) and the worlds' "
             "`fault_kinds` when the site is built, so it lists exactly the kinds, fields and defaults of this "
             "version. A workload's `faults:` is a list of entries; a field another kind uses is refused, by name, "
             "and a kind the chosen world cannot apply is refused before the run starts.", "",
             "| kind | " + " | ".join(worlds) + " |", "|---|" + "---|" * len(worlds)]
    for kind in REGISTRY:
        marks = " | ".join("yes" if kind in kinds else "—" for kinds in worlds.values())
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
