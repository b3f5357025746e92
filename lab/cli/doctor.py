"""`lab doctor`: what each part of the lab needs from this machine, one line per item — ok
with what was found, or what is missing, which part needs it and the one command that
installs it (the checks: ``lab.cli.doctor_checks``). Exits 1 only when `make compare` cannot
run.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict

DESCRIPTION = """\
Checks what each part of the lab needs and prints one line per item: Python (and the lab
installed in it), Java 17+ (PySpark: the aggregation in `make compare`), Chromium and
ChromeDriver (the web-UI test, `lab load --web`), FUSE (power-loss crashes of real brokers),
each real broker's server, free disk where results go, and the fixed ports commands bind by
default (`lab serve DESIGN`, `lab load --web`, `lab load --master`).

Exit status: 0 when everything `make compare` needs is there (Python with the lab installed,
Java 17+), 1 otherwise. Optional items (Chromium, FUSE, the brokers, low disk, a busy port)
print what is missing and how to install it but do not fail."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("doctor", help="check this machine for what each part of the lab needs (Java, Chromium, FUSE, "
                                  "the brokers, disk, ports); exits 1 when `make compare` cannot run",
                   description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)


def default_ports() -> dict[int, list[str]]:
    """Each fixed port a command binds unless told otherwise → the commands (and the flag that
    moves them), read from the commands' own parsers so the list cannot drift: every design's
    `lab serve` ports (its ``PORTS``), Locust's web UI and master. Spark binds none by default:
    its UI is off (``lab.aggregate.spark.DEFAULTS``) unless QUEUE_LAB_SPARK_CONF turns it on,
    and its standalone cluster picks free ports."""
    from lab.aggregate.spark import settings
    from lab.cli import load
    from lab.cli.common import design_parts

    found: dict[int, list[str]] = defaultdict(list)
    for name, module in design_parts("serve"):
        parser = argparse.ArgumentParser()
        module.add_arguments(parser)
        for flag in getattr(module, "PORTS", {}).values():
            port = _default(parser, flag)
            if port:
                found[port].append(f"lab serve {name} ({flag})")
    commands = argparse.ArgumentParser().add_subparsers()
    load.add_parser(commands)
    parser = commands.choices["load"]
    for flag, command in (("--web-port", "lab load --web"), ("--master-bind-port", "lab load --master")):
        port = _default(parser, flag)
        if port:
            found[port].append(f"{command} ({flag})")
    conf = settings()[1]
    if conf.get("spark.ui.enabled", "true") != "false":
        found[int(conf.get("spark.ui.port", 4040))].append("the Spark session's UI (spark.ui.port)")
    return dict(found)


def _default(parser: argparse.ArgumentParser, flag: str) -> int | None:
    """The flag's default port: its argparse default, or the one its help names when the
    default comes from elsewhere (Kestrel's: its config's, "default 22133, or the config's")."""
    for action in parser._actions:
        if flag in action.option_strings:
            if isinstance(action.default, int):
                return action.default
            named = re.search(r"default (\d+)", action.help or "")
            return int(named.group(1)) if named else None
    return None


def cmd_doctor(args: argparse.Namespace) -> int:
    from lab.cli.doctor_checks import every

    checks = every(default_ports())
    for check in checks:
        print(check.line(), flush=True)
    failed = [check.item for check in checks if check.required and not check.ok]
    if failed:
        print(f"lab doctor: `make compare` cannot run without: {', '.join(failed)}")
        return 1
    return 0


#: the subcommands this module adds, and the function each runs
COMMANDS = {"doctor": cmd_doctor}
