"""The documentation's generated reference pages: the CLI reference read from the `lab` parser
itself, and the fault kinds' page (``lab.workloads.fault_reference``) with the worlds that
apply each kind. ``docs/hooks.py`` makes both afresh at build time, so the site cannot drift
from the code; a copy of each is also kept in ``docs/reference/`` (``make reference``), so a
link to them works where the docs are read as files, and a test fails when it is stale.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

#: The width usage lines are wrapped at: fixed, so the page does not depend on the terminal.
USAGE_WIDTH = 100


def cli_markdown() -> str:
    """The CLI reference: every command and subcommand of `lab`, its help, usage and flags."""
    from lab.cli import build_parser

    parser = build_parser()
    lines = ["# CLI reference", "",
             "Generated from the `lab` command's own parser when the site is built "
             "(`lab/cli/reference.py`), so it lists exactly the commands and flags of this "
             "version, with the designs installed where the site was built. `lab COMMAND --help` "
             "prints the same.", "",
             "| command | what it does |", "|---|---|"]
    commands = list(walk(parser))
    for prog, help_text, _ in commands[1:]:
        lines.append(f"| [`{prog}`](#{anchor(prog)}) | {cell(help_text)} |")
    lines.append("")
    for prog, help_text, sub in commands:
        lines += command_section(prog, help_text, sub)
    return "\n".join(lines) + "\n"


def walk(parser: argparse.ArgumentParser, help_text: str = "") -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(prog, help, parser) of ``parser`` and of every subcommand under it, depth first, in the
    order `--help` lists them."""
    yield parser.prog, help_text or parser.description or "", parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                yield from walk(sub, helps.get(name, "") or sub.description or "")


def anchor(prog: str) -> str:
    """The anchor MkDocs gives the heading of ``prog`` (its default slug: lower case, words joined by -)."""
    return "-".join(prog.lower().split())


def command_section(prog: str, help_text: str, parser: argparse.ArgumentParser) -> list[str]:
    """One command's section: heading, help, description, usage, subcommands and flags."""
    level = min(max(len(prog.split()), 2), 4)  # lab and lab run: ##, lab serve kestrel: ###
    lines = [f"{'#' * level} `{prog}`", ""]
    if help_text:
        lines += [help_text, ""]
    if parser.description and parser.description != help_text:
        lines += [parser.description, ""]
    lines += ["```text", usage(parser), "```", ""]
    subs = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    for action in subs:
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        lines += ["| subcommand | what it does |", "|---|---|"]
        lines += [f"| [`{sub.prog}`](#{anchor(sub.prog)}) | {cell(helps.get(name, ''))} |"
                  for name, sub in action.choices.items()]
        lines.append("")
    rows = [flag_row(parser, action) for action in parser._actions
            if not isinstance(action, argparse._SubParsersAction) and action.help != argparse.SUPPRESS]
    if rows:
        lines += ["| flag | value | default | what it does |", "|---|---|---|---|", *rows, ""]
    return lines


def usage(parser: argparse.ArgumentParser) -> str:
    """``parser``'s usage line, wrapped at a fixed width."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def flag_row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """One table row: the flag's names (or a positional's), its value, default and help."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{action.metavar or action.dest}`"
    value = formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
    help_text = formatter._expand_help(action) if action.help else ""
    return f"| {names} | {cell(f'`{value}`' if value else '')} | {cell(default(action))} | {cell(help_text)} |"


def default(action: argparse.Action) -> str:
    """A flag's default as the page shows it: nothing for none, a switch that is off, or help."""
    value = action.default
    if value is None or value is argparse.SUPPRESS or action.nargs == 0 and value is False:
        return ""
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return f"`{value}`"


def cell(text: object) -> str:
    """``text`` fit for a Markdown table cell: one line, its pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def faults_markdown() -> str:
    """The fault kinds' page, with the worlds the lab runs and the kinds each applies."""
    from lab.experiments.runner import WORLDS
    from lab.workloads.fault_reference import markdown

    return markdown(WORLDS)


#: the pages, by their path under docs/, and the function that makes each
PAGES = {"reference/cli.md": cli_markdown, "reference/faults.md": faults_markdown}


def write(docs: Path) -> list[Path]:
    """Write every page under ``docs`` (``make reference``); the paths written."""
    written = []
    for path, make in PAGES.items():
        target = docs / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(make(), encoding="utf-8")
        written.append(target)
    return written


if __name__ == "__main__":
    for page in write(Path(__file__).resolve().parents[2] / "docs"):
        print(f"wrote {page}")
