"""Queuefka: an embedded append-only segment log, byte-compatible with the original Go
queuefka (github.com/ubergarm/queuefka), with its bugs fixed — plus consumer groups, an
HTTP front and the lab's backend adapter.

The library (synchronous, embeddable, on plain files): ``Writer``, ``Reader``,
``CorruptRecord`` ... from ``lab.backends.queuefka.embedded``, also importable from here.
They load on first use (PEP 562 ``__getattr__``), so importing the core, which runs this
package first, never loads plain files, threads or the clock.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Writer", "Reader", "CorruptRecord", "AddressError", "FsyncPolicy", "WriteError"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from lab.backends.queuefka import embedded

        return getattr(embedded, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
