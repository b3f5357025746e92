"""``RuntimeStore``: the Store port (``lab.design.runtime.Store``) on a folder of a Runtime's disk.

The one Store a core builds, in either world: the Runtime's ``Disk`` is the device, this
is the folder the core sees. An fsync on a Runtime disk takes simulated (or executor)
time, so ``RuntimeStore`` starts each requested fsync at once (group commit per file) and
its owner awaits ``settle()`` before it acknowledges anything. Pure: only the Runtime.
(The other Store, on plain files whose fsync blocks, is ``lab.worlds.live.disk.FileStore``.)
"""

from __future__ import annotations

from typing import Any, Callable, cast

from lab.design.runtime import BytesLike, File, Handle, Runtime


class RuntimeFile:
    """A Runtime disk file shared by every user of the store (one handle per name)."""

    def __init__(self, file: File, store: "RuntimeStore", name: str):
        self.file = file
        self.store = store
        self.name = name
        self.syncing: Any = None  # the fsync running on this file, if any
        self.next_sync: Any = None  # the one that starts when it ends, shared by later requests

    def append(self, data: BytesLike) -> int:
        offset = self.file.append(data)
        self.store.touched[self.name] = self.store.rt.now()
        return offset

    def read(self, offset: int, size: int) -> bytes:
        return self.file.read(offset, size)

    def size(self) -> int:
        return self.file.size()

    def truncate(self, size: int) -> None:
        self.file.truncate(size)

    def close(self) -> None:
        pass  # shared: closed with the store


class RuntimeStore:
    """A folder of the Runtime's disk (simulated or live); ``""`` or ``"."`` is its root."""

    def __init__(self, rt: Runtime, directory: str):
        self.rt = rt
        self.directory = directory
        self.location = f"{rt.node}:{directory}"
        self._files: dict[str, RuntimeFile] = {}
        self._pending: dict[str, list[Any]] = {}  # file name -> fsync tasks not known to be done
        # Runtime disks have no mtimes: ages count from the last append seen by this
        # incarnation, or from its boot — late, never early, so retention is conservative.
        self.booted = rt.now()
        self.touched: dict[str, float] = {}

    def _path(self, name: str) -> str:
        return f"{self.directory}/{name}" if self.directory not in ("", ".") else name

    def names(self) -> list[str]:
        return self.rt.disk.list("" if self.directory == "." else self.directory)

    def open(self, name: str) -> RuntimeFile:
        handle = self._files.get(name)
        if handle is None:
            handle = self._files[name] = RuntimeFile(self.rt.disk.open(self._path(name)), self, name)
        return handle

    open_read = open

    def size(self, name: str) -> int:
        return self.open(name).size()

    def exists(self, name: str) -> bool:
        return self.rt.disk.exists(self._path(name))

    def remove(self, name: str) -> None:
        handle = self._files.pop(name, None)
        self.rt.disk.remove(self._path(name))
        if handle is not None:
            self._retire(handle)

    def rename(self, src: str, dst: str) -> None:
        """Rename; an open handle follows the file (as an fd follows its inode)."""
        self.rt.disk.rename(self._path(src), self._path(dst))
        replaced = self._files.pop(dst, None)
        if replaced is not None:
            self._retire(replaced)
        handle = self._files.pop(src, None)
        if handle is not None:
            handle.name = dst
            self._files[dst] = handle
        if src in self._pending:
            self._pending.setdefault(dst, []).extend(self._pending.pop(src))

    def _retire(self, handle: RuntimeFile) -> None:
        """Close a handle no name leads to any more — after the fsyncs already asked for."""
        pending = [task for task in self._pending.get(handle.name, []) if not task.done()]
        if not pending:
            handle.file.close()
            return

        async def close_when_synced() -> None:
            try:
                for task in pending:
                    try:
                        await task
                    except Exception:
                        pass  # raised to whoever settles; here we only close
            finally:
                handle.file.close()

        self.rt.spawn(close_when_synced(), name=f"close {handle.name}")

    def fsync(self, handle: Handle) -> Any:
        """An fsync covering every byte appended so far: the task, which ``settle()``
        awaits. Group commit: while one fsync of the file runs, every request shares the
        single fsync that starts when it ends (which covers their bytes too), so N writers
        waiting on one file cost two fsyncs, not N. The file may be renamed or removed
        meanwhile: its handle stays open until the fsyncs asked for are done."""
        # a Store is handed back the handles it opened: here, RuntimeFiles (the Store port
        # does not tie its handles' type to the store's)
        handle = cast(RuntimeFile, handle)
        running = handle.syncing
        if running is None or running.done():
            task = handle.syncing = self.rt.spawn(handle.file.fsync(), name=f"fsync {handle.name}")
        elif handle.next_sync is not None:
            return handle.next_sync  # already pending for this file's settlers
        else:
            task = handle.next_sync = self.rt.spawn(self._sync_after(handle, running), name=f"fsync {handle.name}")
        self._pending.setdefault(handle.name, []).append(task)
        return task

    async def _sync_after(self, handle: RuntimeFile, running: Any) -> None:
        try:
            await running
        except Exception:
            pass  # that fsync's failure is its waiters'; this one tries again
        handle.syncing, handle.next_sync = handle.next_sync, None
        await handle.file.fsync()

    def sync_names(self) -> None:
        pass  # the Runtime disks make names durable at once

    def age(self, name: str) -> float:
        return self.rt.now() - self.touched.get(name, self.booted)

    def pending(self) -> bool:
        """Whether any fsync was requested and not yet seen done (settle would wait)."""
        return bool(self._pending)

    async def settle(self, match: Callable[[str], bool] | None = None) -> None:
        """Wait for the fsyncs requested so far — of the files ``match`` accepts (all by
        default). Not for ones requested while waiting (a busy server would never answer
        anyone), nor for other files' (a put need not wait for a consumer's commit)."""
        names = [n for n in self._pending if match is None or match(n)]
        try:
            for name in names:
                for task in list(self._pending.get(name, ())):
                    await task
        finally:  # a failed fsync is raised to those waiting now, then forgotten
            for name in names:
                left = [task for task in self._pending.get(name, ()) if not task.done()]
                if left:
                    self._pending[name] = left
                else:
                    self._pending.pop(name, None)

    def close(self) -> None:
        for handle in self._files.values():
            handle.file.close()
        self._files.clear()
