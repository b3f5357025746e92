"""queue-lab: the harness (runtime, runner, records, checker, CLI) and the reference designs."""

__version__ = "0.1.0"
