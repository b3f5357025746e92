"""Queuefka: an embedded append-only segment log, byte-compatible with the original Go
queuefka (github.com/ubergarm/queuefka), with its bugs fixed — plus consumer groups, an
HTTP front and the lab's backend adapter.

The library (synchronous, embeddable; plain files by default, a Runtime's disk in the sim
world): ``Writer``, ``Reader``, ``CorruptRecord``.
"""

from lab.backends.queuefka.core.framing import CorruptRecord
from lab.backends.queuefka.core.reader import AddressError, Reader
from lab.backends.queuefka.core.writer import FsyncPolicy, WriteError, Writer

__all__ = ["Writer", "Reader", "CorruptRecord", "AddressError", "FsyncPolicy", "WriteError"]
