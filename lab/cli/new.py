"""`lab new design NAME [--dir DIR]`: write a small, working design package to start from —
pyproject with the entry point, core, wire, node, `lab serve` entry, Backend, Locust client and
tests — from the templates in ``lab/cli/scaffold/``.

A bad name or a non-empty target folder is a usage error, and nothing is written.
"""

from __future__ import annotations

import argparse
import keyword
import re
from pathlib import Path

from lab.cli.common import UsageError

SCAFFOLD = Path(__file__).with_name("scaffold")
SUFFIX = ".tmpl"
# the package folder's and the test file's stand-in name in the scaffold's layout
STAND_IN = "package"
IDENTIFIER = re.compile(r"[a-z][a-z0-9_]*")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """`lab new design NAME [--dir DIR]`."""
    p = sub.add_parser("new", help="start something new from a template: `lab new design NAME`")
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")
    d = kinds.add_parser("design", help="write a small, working design package DIR/NAME to build on")
    d.add_argument("name", metavar="NAME", help="the design's name: a lower-case Python identifier (my_queue)")
    d.add_argument("--dir", type=Path, default=Path("."), help="where to write NAME/ (default: this folder)")


def class_name(name: str) -> str:
    """``my_queue`` -> ``MyQueue``: the prefix of the generated classes."""
    return "".join(part.capitalize() for part in name.split("_") if part) or name.capitalize()


def check_name(name: str) -> None:
    """UsageError unless ``name`` can be the design's, its package's and its distribution's name."""
    from lab.design.registry import NAME, REGISTRY

    if not IDENTIFIER.fullmatch(name) or keyword.iskeyword(name) or not NAME.fullmatch(name):
        raise UsageError(f"design name {name!r}: use a lower-case Python identifier, a letter first "
                         f"(letters, digits, '_'; at most 40), e.g. my_queue")
    if name in REGISTRY or name in {p.name for p in _problems()}:
        raise UsageError(f"design name {name!r} is taken by an installed design (`lab backends`): choose another")
    if name in ("lab", "models", "loadgen", "tests"):
        raise UsageError(f"design name {name!r} would shadow a package of the lab: choose another")


def _problems():
    from lab.design.registry import problems

    return problems()


def files(name: str) -> dict[Path, str]:
    """The package's files, relative to its folder, filled in for ``name``."""
    names = {"{{name}}": name, "{{Class}}": class_name(name)}
    out: dict[Path, str] = {}
    for template in sorted(SCAFFOLD.rglob(f"*{SUFFIX}")):
        relative = template.relative_to(SCAFFOLD).with_suffix("")  # drops .tmpl
        parts = [name if part == STAND_IN else part.replace(STAND_IN, name) for part in relative.parts]
        text = template.read_text()
        for stand_in, value in names.items():
            text = text.replace(stand_in, value)
        out[Path(*parts)] = text
    return out


def write_design(name: str, where: Path) -> Path:
    """Write the package ``where/name``; its folder. UsageError (nothing written) for a bad
    name or a folder that is there and not empty."""
    check_name(name)
    target = where / name
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"{target}: already there and not empty; choose another --dir or name")
    filled = files(name)  # every template read before the first file is written
    for relative, text in filled.items():
        path = target / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target


def cmd_new(args: argparse.Namespace) -> int:
    target = write_design(args.name, args.dir)
    print(f"wrote {target}/ ({len(files(args.name))} files): the design {args.name!r}")
    print(f"next:  pip install -e {target}")
    print(f"       lab run steady --backend {args.name}     (then --world live)")
    print(f"       lab conform {args.name}")
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"new": cmd_new}
