"""The live world's power-loss disk: a FUSE file system (in Python, over ``mfusepy`` and
libfuse3) that passes a server's data directory through to a backing folder and keeps every
write not yet fsynced undoable, so that a ``crash`` drops what a machine losing power would
drop — for servers the lab did not write (Redis, RabbitMQ, NATS, beanstalkd), whose files do
not go through the lab's own disk. Jepsen does the same with LazyFS.

``undo.py`` is the undo log (no FUSE), ``fs.py`` the file system's operations, ``__main__.py``
the process that mounts it and serves its control socket, ``mount.py`` the parent's handle:
``PowerFs(backing, mountpoint)`` with ``start``/``checkpoint``/``crash``/``stats``/``stop``,
and ``unavailable()``, one line saying why FUSE cannot be used here (or None).
"""

from lab.worlds.live.powerfs.mount import PowerFs, unavailable

__all__ = ["PowerFs", "unavailable"]
