"""Queuefka's on-disk format: record framing, segment names, and what corruption means.

A record is ``u32 LE payload length n | u32 LE XXH32(payload, seed 0) | payload`` — byte
for byte the original Go queuefka's framing (its README's "4 + n" is wrong; the code
writes n). A topic is a folder of segments named by the absolute address of their first
byte, zero-padded to 20 digits, plus ``.slab``. Nothing else is in the format: no magic,
no file header, no index — so every check a reader can make is here.
"""

from __future__ import annotations

import re
import struct

import xxhash

HEADER = struct.Struct("<II")
HEADER_SIZE = HEADER.size
SEGMENT_SUFFIX = ".slab"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.slab$")

#: The length field is a u32; bigger payloads would wrap it and corrupt the stream.
MAX_PAYLOAD = 0xFFFF_FFFF
#: Readers treat a length above this as impossible (corruption), not as "more to come".
DEFAULT_MAX_RECORD = 256 << 20

checksum = xxhash.xxh32_intdigest


class CorruptRecord(ValueError):
    """The bytes at ``address`` are not a valid record; they are never returned as data.

    ``next_address`` is where the following record would start if only the payload is
    damaged (the length is plausible), or None when the framing itself is lost.
    """

    def __init__(self, address: int, reason: str, next_address: int | None = None):
        super().__init__(f"corrupt record at address {address}: {reason}")
        self.address = address
        self.reason = reason
        self.next_address = next_address


def frame(payload: bytes) -> bytes:
    """One record's bytes."""
    return HEADER.pack(len(payload), checksum(payload)) + payload


def check_payload_size(size: int, limit: int = MAX_PAYLOAD) -> None:
    if size > limit:
        raise ValueError(f"payload of {size} bytes is over the limit of {limit} bytes")


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


def segment_base(name: str) -> int | None:
    """The base address a segment file name encodes, or None if it is not a segment."""
    match = _SEGMENT_NAME.match(name)
    return int(match.group(1)) if match else None
