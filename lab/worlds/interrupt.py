"""Stopping: how every `lab` command ends on Ctrl-C or a `kill` — the room of signals,
leftover processes and interrupted folders.

``install`` makes SIGTERM act as SIGINT (a `kill` is how scripts and CI stop things): both
end in ``KeyboardInterrupt``, or in the cancellation of an asyncio run's main task where a
runner has installed its own SIGINT handler. ``lab.cli.main`` then prints
``lab: interrupted`` and exits 130, after ``reap_descendants`` has stopped any process the
command started that its own clean-up missed (server processes live in sessions of their
own, so a terminal's Ctrl-C never reaches them; a worker's children are our grandchildren).

Process pools (``lab matrix``, ``lab swarm``, ``lab mutants``) start workers with
``worker_init``: a worker dies with its parent (the parent-death signal), and a signal ends
its job as an interrupt — the job's own clean-up runs (a run folder is removed, a live
world's servers stopped) — and then the worker itself. ``stop_pool`` ends a pool at once:
jobs not started are cancelled and running ones interrupted, not waited for.

A folder of runs that was cut short (``lab compare``, ``matrix``, ``swarm``, ``mutants``)
carries ``interrupted.json`` (``mark_interrupted``); ``lab report``, ``lab aggregate`` and
the notebooks' listings skip it by name (``interrupted``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import Executor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command Ctrl-C ended
MARKER = "interrupted.json"  # in a folder of runs that was cut short
GRACE = 2.0  # seconds a process has to end on SIGTERM once the lab is interrupted, before kill -9

_in_worker = False  # this process is a pool worker (worker_init ran)
_in_job = False  # ... and it is running a job (worker_call)
_stopping = False  # ... and an interrupt has reached that job: its clean-up is running
received: int | None = None  # the signal an asyncio loop's handler (on_signals) was told of


# ----------------------------------------------------------------------------- signals


def _on_term(signum: int, frame: Any) -> None:
    """SIGTERM as SIGINT: whatever handles SIGINT now handles this too."""
    handler = signal.getsignal(signal.SIGINT)
    if handler in (signal.SIG_IGN, signal.SIG_DFL, None) or handler is signal.default_int_handler:
        raise KeyboardInterrupt
    # asyncio's Runner (cancels its main task) or a loop's add_signal_handler (a wake-up
    # byte): both are reached by raising SIGINT itself
    signal.raise_signal(signal.SIGINT)


def install() -> dict[int, Any]:
    """SIGTERM acts as SIGINT from now on, in this process; the handlers of both as they were
    (for ``restore``), none off the main thread (where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, _on_term)
    return previous


def restore(previous: dict[int, Any], ignore: bool = False) -> None:
    """Put back the handlers ``install`` replaced; or, with ``ignore``, ignore those signals
    (while an interrupted command finishes its clean-up: a second Ctrl-C must not cut it short)."""
    for sig, handler in previous.items():
        if handler is not None:
            signal.signal(sig, signal.SIG_IGN if ignore else handler)


def on_signals(loop: Any, callback: Callable[[], None], signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)) -> None:
    """``loop.add_signal_handler`` for a server's clean stop, remembering the signal (``received``)
    so that the command can still end as interrupted once it has stopped cleanly."""

    def handler(signum: int) -> None:
        global received
        received = signum
        callback()

    for sig in signals:
        loop.add_signal_handler(sig, handler, sig)


def raise_if_received() -> None:
    """KeyboardInterrupt if a signal stopped this command (``on_signals``)."""
    if received is not None:
        raise KeyboardInterrupt


# ----------------------------------------------------------------------------- processes


def _ppid_and_state(pid: int) -> tuple[int, str] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0]


def descendants(pid: int | None = None) -> list[int]:
    """Every living process below ``pid`` (this one by default), parents before children."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _ppid_and_state(int(entry))
            if found is not None and found[1] != "Z":
                children.setdefault(found[0], []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie has ended). Never waited for here: the exit status belongs to whoever
    started the process (a Popen, a pool), which would otherwise think it still runs."""
    found = _ppid_and_state(pid)
    return found is not None and found[1] != "Z"


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _ignores_sigterm(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), "0")
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def reap(pids: Iterable[int], grace: float = GRACE) -> list[int]:
    """SIGTERM (and SIGCONT, for a paused one) each of ``pids``, kill -9 those still there after
    ``grace`` seconds (at once, one that ignores SIGTERM); the pids that had to be killed."""
    pids = [pid for pid in pids if _alive(pid)]
    for pid in pids:
        _signal(pid, signal.SIGKILL if _ignores_sigterm(pid) else signal.SIGTERM)
        _signal(pid, signal.SIGCONT)
    deadline = time.monotonic() + grace
    while (pids := [pid for pid in pids if _alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    return pids


def reap_descendants(grace: float = GRACE) -> list[int]:
    """The last word of an interrupted command: every process below this one that is still
    there (a command's own clean-up stops what it started; this catches what it missed).
    The whole tree is listed before anything is signalled, so grandchildren whose parent
    ends first are not lost to init."""
    if not sys.platform.startswith("linux"):
        return []
    tree = descendants()
    _release_multiprocessing_helpers()
    return reap(tree, grace)


def _release_multiprocessing_helpers() -> None:
    """Close our end of the pipes that keep multiprocessing's forkserver and resource tracker
    alive: they then end on their own, cleanly (both ignore SIGTERM, and the tracker unlinks
    what it tracks). Not waited for here: ``reap`` does, with its grace."""
    helpers = (("multiprocessing.forkserver", "_forkserver", "_forkserver_alive_fd"),
               ("multiprocessing.resource_tracker", "_resource_tracker", "_fd"))
    for module, name, fd_attribute in helpers:
        helper: Any = getattr(sys.modules.get(module), name, None)  # a private object of multiprocessing
        fd = getattr(helper, fd_attribute, None)
        if fd is None:
            continue
        setattr(helper, fd_attribute, None)
        if module.endswith("forkserver"):
            helper._forkserver_pid = None  # reap waits for it, not the forkserver's own _stop
        try:
            os.close(fd)
        except OSError:
            pass


# ----------------------------------------------------------------------------- process pools


def worker_init(then: Callable[[], None] | None = None) -> None:
    """A pool worker's initializer: it dies with its parent, and SIGINT or SIGTERM interrupts
    its job (whose clean-up runs) and then ends it; ``then`` runs after."""
    global _in_worker
    _in_worker = True
    if sys.platform.startswith("linux"):
        from lab.worlds.live.processes import die_with_parent

        parent = os.getppid()
        die_with_parent()()  # PR_SET_PDEATHSIG: SIGKILL when the parent ends
        if os.getppid() != parent:  # it ended before the signal was set
            os._exit(EXIT_CODE)
        # A forkserver's child inherits the pipe end whose closing tells the forkserver that the lab
        # has ended; held here, the forkserver (our parent) would outlive a killed lab, and so would
        # we. This worker starts no process through the forkserver: let the lab's end reach it.
        forkserver: Any = getattr(sys.modules.get("multiprocessing.forkserver"), "_forkserver", None)
        if getattr(forkserver, "_forkserver_alive_fd", None) is not None:
            fd, forkserver._forkserver_alive_fd = forkserver._forkserver_alive_fd, None
            os.close(fd)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _worker_signal)
    if then is not None:
        then()


def _worker_signal(signum: int, frame: Any) -> None:
    global _stopping
    if _stopping:
        # A terminal's Ctrl-C reaches the worker, then stop_pool's SIGTERM does: a second
        # KeyboardInterrupt would break off the clean-up the first one started (a run folder
        # half removed). stop_pool's kill -9 after its grace still ends a clean-up that hangs.
        return
    if _in_job:
        _stopping = True
        raise KeyboardInterrupt  # the job's finally blocks run; worker_call then ends the worker
    os._exit(EXIT_CODE)  # idle: nothing to clean up, and no traceback from the pool's queue


def worker_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as a pool's job: interrupted, the worker ends once ``fn`` has cleaned up.
    In the parent's own process (``--jobs 1``), an interrupt goes up as usual."""
    global _in_job
    _in_job = True
    try:
        return fn(*args)
    except KeyboardInterrupt:
        if _in_worker:
            os._exit(EXIT_CODE)
        raise
    finally:
        _in_job = False


def stop_pool(executor: Executor, interrupted: bool, grace: float = GRACE) -> None:
    """Shut ``executor`` down: waiting for its jobs when not ``interrupted``; else at once —
    pending jobs cancelled, running ones interrupted (SIGTERM: their clean-up runs), a worker
    still there after ``grace`` seconds killed."""
    if not interrupted:
        executor.shutdown(wait=True, cancel_futures=True)
        return
    workers = list((getattr(executor, "_processes", None) or {}).values())
    executor.shutdown(wait=False, cancel_futures=True)
    reap([w.pid for w in workers if w.pid is not None], grace)
    for worker in workers:
        worker.join(0.1)


# ----------------------------------------------------------------------------- folders


def mark_interrupted(directory: str | os.PathLike, command: str, **facts: Any) -> Path:
    """Mark a folder of runs as cut short: ``interrupted.json`` in it (the command, when, and
    ``facts`` such as the runs done). Listings of runs skip it (``interrupted``)."""
    remove_unfinished_runs(directory)
    path = Path(directory) / MARKER
    record = {"interrupted": True, "command": command,
              "at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **facts}
    path.write_text(json.dumps(record, indent=2, default=str) + "\n")
    return path


def remove_unfinished_runs(directory: str | os.PathLike) -> list[Path]:
    """Remove the run folders under ``directory`` that hold samples but no manifest.json, and
    return them: runs whose worker was killed (``stop_pool``'s kill -9) before its own clean-up
    had removed them. Called once the pool has stopped, so no run is still writing."""
    unfinished = [folder for folder in Path(directory).rglob("*")
                  if folder.is_dir() and any(folder.glob("samples*")) and not (folder / "manifest.json").exists()]
    for folder in unfinished:
        shutil.rmtree(folder, ignore_errors=True)
    return unfinished


def interrupted(folder: str | os.PathLike) -> bool:
    """Was ``folder`` (a run's, or a folder of runs) cut short by an interrupt? Its marker,
    or ``"interrupted": true`` in its manifest.json."""
    folder = Path(folder)
    if (folder / MARKER).is_file():
        return True
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("interrupted") is True


def inside_interrupted(path: str | os.PathLike) -> Path | None:
    """The interrupted folder ``path`` is, or is inside (up to four levels: a matrix's run
    is backend/options/scenario/seed), or None."""
    path = Path(path)
    for folder in (path, *list(path.parents)[:4]):
        if interrupted(folder):
            return folder
    return None


def split_interrupted(paths: Iterable[str | os.PathLike]) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """``paths`` (runs, folders of runs) as those to read and those to skip: each skipped one
    with the interrupted folder that makes it so (itself, or a folder it is inside)."""
    kept: list[Path] = []
    skipped: list[tuple[Path, Path]] = []
    for path in map(Path, paths):
        cut = inside_interrupted(path)
        if cut is None:
            kept.append(path)
        else:
            skipped.append((path, cut))
    return kept, skipped


def skipped_line(path: Path, cut: Path) -> str:
    """What a listing of runs says of one it skips (``lab: skipped ...``)."""
    where = "" if cut == path else f" (inside {cut})"
    return f"lab: skipped {path}: interrupted{where}, see {cut / MARKER if (cut / MARKER).is_file() else cut / 'manifest.json'}"
