"""The documentation's generated pages and figures: the CLI reference names every command and
every flag the parser has, the fault page every kind of the registry and the worlds that apply
it, and `lab figures` copies what an experiment made into the docs folder with a stamp naming
the command and date (the plumbing, with a stand-in experiment: the real ones take minutes)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import ClassVar

import pytest

from lab.cli import build_parser, main
from lab.cli.reference import anchor, cli_markdown, faults_markdown, walk
from lab.experiments import figures
from lab.experiments.runner import WORLDS
from lab.workloads import fault_reference
from lab.workloads.fault_base import Fault
from lab.workloads.faults import REGISTRY, kinds_in


def test_cli_page_names_every_command_and_every_flag_of_one():
    page = cli_markdown()
    progs = [prog for prog, _, _ in walk(build_parser())]
    assert len(progs) > 20 and "lab figures" in progs
    for prog in progs:
        assert f"`{prog}`" in page and f"(#{anchor(prog)})" in page or prog == "lab"
    matrix = next(p for prog, _, p in walk(build_parser()) if prog == "lab matrix")
    flags = [name for action in matrix._actions for name in action.option_strings]
    assert "--seeds" in flags and "--world" in flags
    section = page.split("## `lab matrix`")[1].split("\n## ")[0]
    for flag in flags:
        assert f"`{flag}`" in section, flag
    assert "| `--seeds` | `SEEDS` | `5` |" in section  # its value and default, read from the parser


def test_a_new_flag_shows_on_the_cli_page(monkeypatch):
    import lab.cli as cli

    original = cli.build_parser

    def parser() -> argparse.ArgumentParser:
        p = original()
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        sub.choices["run"].add_argument("--brand-new", default="x|y", help="a flag added | today")
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    page = cli_markdown()
    assert "| `--brand-new` | `BRAND_NEW` | `x\\|y` | a flag added \\| today |" in page


def test_fault_page_names_every_kind_and_the_worlds_that_apply_it():
    page = faults_markdown()
    for kind, cls in REGISTRY.items():
        assert f"\n## {kind}\n" in page
        section = page.split(f"\n## {kind}\n")[1].split("\n## ")[0]
        applied = [w for w in WORLDS if kind in kinds_in(w)]
        assert f"**Applied by:** {', '.join(f'the {w} world' for w in applied)}." in section
        for spec in cls.own_fields():
            assert f"| `{spec.name}` |" in section, (kind, spec.name)
    late = page.split("\n## late-writes\n")[1].split("\n## ")[0]
    assert "the sim world." in late and "live world" not in late
    assert "| `late_s` | `1.0` |" in late  # the default the kind's parser gives
    assert "| `ms` | required |" in page.split("\n## link-delay\n")[1]


@dataclass(frozen=True)
class Quake(Fault):
    """Shakes the targets."""

    kind: ClassVar[str] = "quake"
    magnitude: float = 1.0  # a field declared without own_field: no meaning


def test_fault_page_refuses_a_kind_or_field_without_a_meaning_or_a_world_unknown(monkeypatch):
    monkeypatch.setitem(REGISTRY, "quake", Quake)
    with pytest.raises(fault_reference.Undocumented, match="quake.*magnitude"):
        fault_reference.markdown(WORLDS)
    monkeypatch.setattr(Quake, "worlds", ("sim", "moon"))
    with pytest.raises(fault_reference.Undocumented, match="quake.*'moon'"):
        fault_reference.markdown(WORLDS)


def test_every_required_field_is_required():
    needed = {kind: fault_reference.required(cls) for kind, cls in REGISTRY.items()}
    assert needed["link-delay"] == {"ms": 50} and needed["crash"] == {}
    for kind, fields in needed.items():
        for name in fields:
            entry = {"fault": kind, **{k: v for k, v in fields.items() if k != name}}
            with pytest.raises(ValueError, match=name):
                REGISTRY[kind].parse_fields(entry)


def _stand_in(folder: Path, quick: bool, echo) -> dict[str, Path]:
    folder.mkdir(parents=True)
    (folder / "made.png").write_bytes(b"\x89PNG stand-in")
    (folder / "table.md").write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    return {"stand-in.png": folder / "made.png", "stand-in-table.md": folder / "table.md"}


def test_lab_figures_copies_the_figures_and_stamps_command_and_date(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(figures.FIGURES, "stand-in", figures.Figure(
        "stand-in", "lab stand-in --seeds 5", ("stand-in.png", "stand-in-table.md"), _stand_in, "lab stand-in --quick"))
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "figures.json").write_text(json.dumps({"other.png": {"command": "lab other", "date": "2026-01-01"}}))
    assert main(["figures", "--only", "stand-in", "--docs", str(docs), "--out", str(tmp_path / "runs")]) == 0
    assert (docs / "stand-in.png").read_bytes() == b"\x89PNG stand-in"
    stamps = json.loads((docs / "figures.json").read_text())
    assert stamps["other.png"]["command"] == "lab other"  # a figure not remade keeps its stamp
    stamp = stamps["stand-in.png"]
    assert stamp["command"] == "lab stand-in --seeds 5" and stamp["quick"] is False
    assert stamp["date"] == datetime.now(timezone.utc).date().isoformat()
    assert date.fromisoformat(stamp["date"]) and stamp["seconds"] >= 0
    page = (docs / "stand-in-table.md").read_text()
    assert page.startswith("# ") and f"`lab stand-in --seeds 5` on {stamp['date']}" in page and "| 1 | 2 |" in page
    assert "[1/1] stand-in: lab stand-in --seeds 5" in capsys.readouterr().out


def test_lab_figures_quick_never_writes_into_docs(tmp_path, monkeypatch):
    monkeypatch.setitem(figures.FIGURES, "stand-in", figures.Figure(
        "stand-in", "lab stand-in", ("stand-in.png",), _stand_in, "lab stand-in --quick"))
    monkeypatch.chdir(tmp_path)
    assert main(["figures", "--only", "stand-in", "--quick", "--out", "runs"]) == 0
    assert not (tmp_path / "docs").exists()
    stamp = json.loads((tmp_path / "runs" / "docs" / "figures.json").read_text())["stand-in.png"]
    assert stamp["quick"] is True and stamp["command"] == "lab stand-in --quick"
    assert "quick set" in figures.caption(stamp)


def test_lab_figures_refuses_an_unknown_figure(tmp_path, capsys):
    assert main(["figures", "--only", "compare,nope", "--docs", str(tmp_path)]) == 2
    assert "choose from compare, matrix, brokers" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_an_interrupted_figures_run_keeps_the_finished_stamps(tmp_path, monkeypatch):
    def interrupted(folder: Path, quick: bool, echo) -> dict[str, Path]:
        raise KeyboardInterrupt

    monkeypatch.setitem(figures.FIGURES, "stand-in", figures.Figure(
        "stand-in", "lab stand-in", ("stand-in.png",), _stand_in))
    monkeypatch.setitem(figures.FIGURES, "cut", figures.Figure("cut", "lab cut", ("cut.png",), interrupted))
    with pytest.raises(KeyboardInterrupt):
        figures.make_figures(["stand-in", "cut"], tmp_path / "docs", tmp_path / "runs", echo=lambda line: None)
    assert set(json.loads((tmp_path / "docs" / "figures.json").read_text())) == {"stand-in.png"}
    assert not (tmp_path / "docs" / "cut.png").exists()


def test_the_reference_pages_kept_in_docs_are_current():
    """docs/reference/ holds a copy of each generated page, so that links work in the sources;
    the site makes them afresh, and this fails when a copy is stale."""
    from lab.cli import reference

    docs = Path(__file__).resolve().parents[1] / "docs"
    for path, make in reference.PAGES.items():
        assert (docs / path).read_text(encoding="utf-8") == make(), f"docs/{path} is stale: run `make reference`"
