"""Store URLs: which store a URL names, and where it is.

- ``memory:`` -> the in-memory store (one process, gone at exit);
- ``sqlite:///abs/path.db``, ``sqlite:relative.db`` or a bare path -> a SQLite file;
- ``postgresql://...`` (or ``postgres://...``) -> a PostgreSQL database, the URL as libpq reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

ACCEPTED = "memory:, sqlite:///path/to/file.db (or a bare file path), postgresql://user@host/db"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


@dataclass(frozen=True)
class StoreUrl:
    kind: str  # "memory", "sqlite" or "postgresql"
    target: str  # the file path, the libpq URL, or "" for memory


def parse_store_url(url: str) -> StoreUrl:
    """What ``url`` names; a ValueError naming the accepted forms if it names nothing."""
    text = url.strip()
    match = _SCHEME.match(text)
    scheme = match.group(1).lower() if match else None
    if not text:
        raise ValueError(f"an empty store URL; accepted: {ACCEPTED}")
    if match is None:  # no scheme
        return StoreUrl("sqlite", text)
    rest = text[match.end():]
    if scheme == "memory" and rest in ("", "//"):
        return StoreUrl("memory", "")
    if scheme == "sqlite":
        # sqlite:///abs/path (a file URL: empty host) or sqlite:relative/path; a host is no file
        if rest.startswith("///"):
            return StoreUrl("sqlite", rest[2:])
        if rest and not rest.startswith("//"):
            return StoreUrl("sqlite", rest)
    if scheme in ("postgresql", "postgres") and rest.startswith("//"):
        return StoreUrl("postgresql", text)
    raise ValueError(f"not a store URL: {redacted(url)!r}; accepted: {ACCEPTED}")


def redacted(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL at all: it has nothing to hide that we can find
        return url
    if password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))
