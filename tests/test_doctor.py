"""`lab doctor`: on this machine (everything installed) every line is ok and it exits 0; with
Java, Chromium or a broker hidden from the PATH the hidden item's line says missing and names
its install command, the others stay ok, and only a missing Java fails it; a default port held
by another process is named with the command it would stop."""

from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from lab.cli import main

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / ".venv" / "bin" / "lab"
WEB_PORT = 8089  # `lab load --web`'s default: a fixed port the doctor checks


def _lines(out: str) -> dict[str, str]:
    """Each line by its item (the second column): "java" -> "ok java required Java 17..."."""
    return {line.split()[1] if not line.startswith("busy") else " ".join(line.split()[1:3]): line
            for line in out.splitlines() if not line.startswith("lab doctor:")}


def _doctor(env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(LAB), "doctor"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def _path_without(tmp_path: Path, hidden: str) -> str:
    """A private bin dir with a symlink to every program on the PATH but ``hidden`` (the first
    of each name, as the PATH finds it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            link = bin_dir / entry.name
            if entry.name != hidden and not link.exists() and not link.is_symlink() and os.access(entry.path, os.X_OK):
                link.symlink_to(entry.path)
    return str(bin_dir)


def test_this_machine_has_everything_then_a_busy_default_port_is_named(capsys):
    done = _doctor()
    assert done.returncode == 0, done.stdout + done.stderr
    lines = _lines(done.stdout)
    items = {"python", "java", "chromium", "fuse", "redis", "rabbitmq", "nats", "beanstalkd", "disk", "ports"}
    assert items <= set(lines)
    assert all(line.startswith("ok ") for line in lines.values()), done.stdout
    assert int(re.search(r"Java (\d+)", lines["java"]).group(1)) >= 17
    assert f" {WEB_PORT} " in lines["ports"] + " "
    # the same test, not another: a port held here would be busy for a parallel all-ok run
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("127.0.0.1", WEB_PORT))
        holder.listen()
        assert main(["doctor"]) == 0  # a port is optional; in this process, which holds it
    busy = _lines(capsys.readouterr().out)
    line = busy[f"port {WEB_PORT}"]
    assert line.startswith("busy") and f"(pid {os.getpid()})" in line and "lab load --web (--web-port)" in line
    assert "ports" not in busy  # the free ones are not listed as ok beside it


@pytest.mark.parametrize("hidden, item, install, code", [
    ("java", "java", "sudo apt-get install -y openjdk-17-jre-headless", 1),
    ("chromium", "chromium", "sudo apt-get install -y chromium chromium-driver", 0),
    ("redis-server", "redis", "sudo apt-get install -y redis-server", 0),  # /usr/bin: no fallback finds it
])
def test_a_program_hidden_from_the_path_is_missing_with_its_install_command(tmp_path, monkeypatch, capsys, hidden,
                                                                            item, install, code):
    # in this process (the lab's modules are loaded already): seconds, not a start-up per case
    monkeypatch.setenv("PATH", _path_without(tmp_path, hidden))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    assert main(["doctor"]) == code
    lines = _lines(capsys.readouterr().out)
    assert lines[item].startswith("missing") and lines[item].endswith(install), lines[item]
    others = {name: line for name, line in lines.items() if name != item and not name.startswith(("port", "disk"))}
    assert len(others) >= 7 and all(line.startswith("ok ") for line in others.values()), others
