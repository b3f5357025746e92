"""CassieQ's authentication and authorization (spec §2.2, §2.3): pure functions, no I/O.

The permission levels and their short forms; the three ways a client proves it holds an
account key (a raw ``Key`` header, a ``Signed`` request header, signed query claims);
the signing both sides use, so a client signs with exactly the code the server checks
with. The clock comes in as ``now_ms`` (milliseconds since the epoch): nothing here
reads the time.

What the caller (the HTTP front) does: look the account's keys up in the store, call
``authenticate`` (a ``Principal`` or an ``AuthFailure``, which is a 401 with an empty
body), then ``authorize`` the endpoint's level (False is a 403).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from urllib.parse import quote, unquote

#: the header carrying a signed request's time
REQUEST_TIME_HEADER = "x-cassieq-request-time"
KEY_SCHEME = "Key"
SIGNED_SCHEME = "Signed"
#: ``auth.allowedClockSkew``'s default in the original's code (its docker config uses one minute)
DEFAULT_SKEW_MS = 5_000
#: the query claims' parameter names, in the order the admin writes them
CLAIM_PARAMETERS = ("auth", "q", "st", "et", "sig")


class AuthorizationLevel(Enum):
    """A permission; the value is the short form. Definition order is the original's enum
    order, which fixes the canonical level string (``rpuag``...)."""

    NONE = "n"
    READ_MESSAGE = "r"
    PUT_MESSAGE = "p"
    UPDATE_MESSAGE = "u"
    ACK_MESSAGE = "a"
    GET_QUEUE_INFORMATION = "g"
    CREATE_QUEUE = "c"
    DELETE_QUEUE = "d"

    @property
    def short_form(self) -> str:
        return self.value

    @property
    def level_name(self) -> str:
        """The original's name of the level (``ReadMessage``), as the admin API shows it."""
        return _LEVEL_NAMES[self]


_LEVEL_NAMES = {
    AuthorizationLevel.NONE: "None",
    AuthorizationLevel.READ_MESSAGE: "ReadMessage",
    AuthorizationLevel.PUT_MESSAGE: "PutMessage",
    AuthorizationLevel.UPDATE_MESSAGE: "UpdateMessage",
    AuthorizationLevel.ACK_MESSAGE: "AckMessage",
    AuthorizationLevel.GET_QUEUE_INFORMATION: "GetQueueInformation",
    AuthorizationLevel.CREATE_QUEUE: "CreateQueue",
    AuthorizationLevel.DELETE_QUEUE: "DeleteQueue",
}
_ORDER = {level: index for index, level in enumerate(AuthorizationLevel)}

#: what a raw key or a signed request grants: every level but None
ALL_LEVELS: frozenset[AuthorizationLevel] = frozenset(AuthorizationLevel) - {AuthorizationLevel.NONE}


def parse_level(text: str) -> AuthorizationLevel:
    """One level from its short form or its name (``"c"`` or ``"CreateQueue"``); anything
    else is None, as in the original."""
    for level in AuthorizationLevel:
        if text == level.short_form or text == level.level_name:
            return level
    return AuthorizationLevel.NONE


def _without_none(levels: Iterable[AuthorizationLevel]) -> frozenset[AuthorizationLevel]:
    found = frozenset(levels)
    # a set that names None grants nothing at all
    return frozenset() if AuthorizationLevel.NONE in found else found


def parse_levels(text: str | None) -> frozenset[AuthorizationLevel]:
    """A level string, one short form per character (``auth=rp``); an unknown character is
    None, and a set containing None is empty."""
    return _without_none(parse_level(char) for char in (text or ""))


def levels_of(entries: Iterable[AuthorizationLevel | str] | str) -> frozenset[AuthorizationLevel]:
    """Levels from a list of levels, names or short forms (the permissions endpoint's
    ``levels``), or from a short-form string; same None rule as ``parse_levels``."""
    if isinstance(entries, str):
        return parse_levels(entries)
    return _without_none(e if isinstance(e, AuthorizationLevel) else parse_level(e) for e in entries)


def canonical_levels(levels: Iterable[AuthorizationLevel]) -> str:
    """The short forms in enum order: what a query claim's signature covers."""
    return "".join(level.short_form for level in sorted(set(levels), key=_ORDER.__getitem__))


# ---- time: ISO-8601 without millis, always printed in UTC with a literal Z ----------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ISO = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(Z|[+-]\d{2}(?::?\d{2})?)\Z")


def format_iso(ms: int) -> str:
    """``yyyy-MM-dd'T'HH:mm:ssZ`` in UTC; milliseconds are dropped (floored), as Joda's
    no-millis printer does."""
    moment = _EPOCH + timedelta(milliseconds=ms - ms % 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> int:
    """Milliseconds since the epoch of an ISO-8601 date-time with seconds, no fraction, and
    a zone (``Z``, ``+hh``, ``+hh:mm`` or ``+hhmm``): what the original's parser accepts.
    ValueError otherwise."""
    match = _ISO.match(text.strip())
    if match is None:
        raise ValueError(f"not an ISO-8601 date-time without millis: {text!r}")
    year, month, day, hour, minute, second = (int(part) for part in match.groups()[:6])
    zone = match.group(7)
    offset = timedelta(0)
    if zone != "Z":
        digits = zone[1:].replace(":", "")
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0))
        if zone[0] == "-":
            offset = -offset
    moment = datetime(year, month, day, hour, minute, second, tzinfo=timezone(offset))
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    try:
        format_iso(ms)  # a time the zone pushes out of the calendar (year 0 or 10000) cannot be signed
    except (OverflowError, ValueError):
        raise ValueError(f"a date-time outside the years 1 to 9999: {text!r}") from None
    return ms


# ---- signatures -----------------------------------------------------------------------------

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def key_bytes(key: str) -> bytes:
    """The HMAC key: the account key Base64url-decoded (it is stored without padding).
    ValueError if the key is not Base64url."""
    text = key.strip()
    padded = text + "=" * (-len(text) % 4)
    try:
        return base64.b64decode(padded, altchars=b"-_", validate=True)
    except ValueError as error:  # binascii.Error is a ValueError
        raise ValueError(f"an account key must be Base64url: {error}") from None


def signature(key: str, string_to_sign: str) -> str:
    """Base64url without padding of HMAC-SHA256 over the UTF-8 string, keyed by the decoded key."""
    return _b64url(hmac.new(key_bytes(key), string_to_sign.encode("utf-8"), hashlib.sha256).digest())


def canonical_path(path: str) -> str:
    """``"/" + path`` without leading and trailing slashes: the path as sent (percent-encoded;
    a query is cut off), URL-decoded. Client and server both pass the raw path here."""
    return "/" + unquote(path.split("?", 1)[0]).strip("/")


def request_string_to_sign(account: str, method: str, path: str, time_ms: int) -> str:
    return "\n".join((account, method.upper(), canonical_path(path), format_iso(time_ms)))


def claims_string_to_sign(account: str, levels: Iterable[AuthorizationLevel], start_ms: int | None,
                          end_ms: int | None, queue: str | None) -> str:
    """Lines joined with newlines; absent ones are left out (the level line is always there,
    even when empty)."""
    lines = [account, canonical_levels(levels)]
    if start_ms is not None:
        lines.append("startTime:" + format_iso(start_ms))
    if end_ms is not None:
        lines.append("endTime:" + format_iso(end_ms))
    if queue is not None:
        lines.append("q:" + queue)
    return "\n".join(lines)


def sign_request(account: str, key: str, method: str, path: str, now_ms: int) -> dict[str, str]:
    """The two headers of a signed request (full access) for ``method path`` at ``now_ms``."""
    sig = signature(key, request_string_to_sign(account, method, path, now_ms))
    return {"Authorization": f"{SIGNED_SCHEME} {sig}", REQUEST_TIME_HEADER: format_iso(now_ms)}


def sign_query(account: str, key: str, levels: Iterable[AuthorizationLevel | str] | str,
               queue: str | None = None, start: int | None = None, end: int | None = None) -> str:
    """Query claims ``auth=…[&q=…][&st=…][&et=…]&sig=…`` granting exactly ``levels``,
    optionally only on ``queue`` and only between ``start`` and ``end`` (epoch ms; the
    claim keeps whole seconds)."""
    granted = levels_of(levels)
    params = [("auth", canonical_levels(granted))]
    if queue is not None:
        params.append(("q", queue))
    if start is not None:
        params.append(("st", format_iso(start)))
    if end is not None:
        params.append(("et", format_iso(end)))
    params.append(("sig", signature(key, claims_string_to_sign(account, granted, start, end, queue))))
    # valid names, ISO times and Base64url need no escaping: the text is the original's
    return "&".join(f"{name}={quote(value, safe=':')}" for name, value in params)


# ---- checking a request -----------------------------------------------------------------------

@dataclass(frozen=True)
class Principal:
    """Who a request proved to be: the account and exactly the levels it holds."""

    account: str
    levels: frozenset[AuthorizationLevel]
    scheme: str  # "key", "signed" or "query"


@dataclass(frozen=True)
class AuthFailure:
    """Authentication failed: 401 with an empty body. ``reason`` is for logs, not the client."""

    reason: str
    status: int = 401


@dataclass(frozen=True)
class _Header:
    scheme: str  # "key" or "signed"
    credential: str


@dataclass(frozen=True)
class _Claims:
    levels: frozenset[AuthorizationLevel]
    sig: str
    start_ms: int | None
    end_ms: int | None
    queue: str | None


def _first(mapping: Mapping[str, str], name: str) -> str | None:
    for key, value in mapping.items():
        if key.lower() == name:
            return value
    return None


def _parse_header(headers: Mapping[str, str]) -> _Header | None:
    """``Key <key>`` or ``Signed <sig>``: the scheme is case-insensitive and ends at the
    first space (so ``Key: <key>`` is no scheme at all). None if the header does not parse."""
    value = _first(headers, "authorization")
    if not value:
        return None
    parts = value.split(" ", 1)
    if len(parts) != 2:
        return None
    scheme, credential = parts[0].strip(), parts[1].strip()
    if scheme.lower() == KEY_SCHEME.lower():
        return _Header("key", credential)
    if scheme.lower() == SIGNED_SCHEME.lower():
        return _Header("signed", credential)
    return None


def _parse_claims(query: Mapping[str, str]) -> _Claims | None:
    """The query claims, None if there is no ``sig``; ValueError if a time is malformed."""
    sig = query.get("sig")
    if not sig:
        return None
    start, end, queue = query.get("st"), query.get("et"), query.get("q")
    return _Claims(parse_levels(query.get("auth")), sig,
                   parse_iso(start) if start else None,
                   parse_iso(end) if end else None,
                   queue.strip() if queue else None)


def _same(provided: str, computed: str) -> bool:
    return hmac.compare_digest(provided.encode("utf-8"), computed.encode("utf-8"))


def _signed_by_any(keys: Iterable[str], provided: str, string_to_sign: str) -> bool:
    """True if any key's signature of the string is the provided one; every key is tried."""
    if not provided:
        return False
    matched = False
    for key in keys:
        try:
            matched |= _same(provided, signature(key, string_to_sign))
        except ValueError:
            continue  # a key that is not Base64url signs nothing
    return matched


def authenticate(account: str, account_keys: Mapping[str, str] | None, method: str, path: str,
                 headers: Mapping[str, str], query: Mapping[str, str], queue_name_in_path: str | None,
                 now_ms: int, skew_ms: int = DEFAULT_SKEW_MS) -> Principal | AuthFailure:
    """Check a request to ``account``'s API (spec §2.3).

    ``account_keys`` is the account's key map (None if the account does not exist);
    ``path`` the request path as sent (percent-encoded); ``headers`` and ``query`` the first
    value of each (query values decoded); ``queue_name_in_path`` the ``{queueName}`` of the
    route, if it has one. An ``Authorization`` header that parses wins; otherwise the query
    claims; neither is a failure.
    """
    header = _parse_header(headers)
    claims: _Claims | None = None
    if header is None:
        try:
            claims = _parse_claims(query)
        except ValueError as error:
            return AuthFailure(f"malformed query claims: {error}")
        if claims is None:
            return AuthFailure("no credentials")
    # The original parses the query claims even when the header wins, so a malformed
    # st/et beside a valid header is a 401 there; the spec's rule (the header wins) is kept.
    if account_keys is None:
        return AuthFailure("unknown account")
    keys = list(account_keys.values())

    if header is not None and header.scheme == "key":
        matched = False
        for key in keys:
            matched |= _same(header.credential, key)
        return Principal(account, ALL_LEVELS, "key") if matched else AuthFailure("wrong key")

    if header is not None:
        raw_time = _first(headers, REQUEST_TIME_HEADER)
        try:
            # a missing time is the epoch: it signs, and then fails the skew check
            time_ms = parse_iso(raw_time) if raw_time else 0
        except ValueError as error:
            return AuthFailure(f"malformed request time: {error}")
        if not _signed_by_any(keys, header.credential, request_string_to_sign(account, method, path, time_ms)):
            return AuthFailure("bad signature")
        if not now_ms - skew_ms < time_ms < now_ms + skew_ms:
            return AuthFailure("request time outside the allowed clock skew")
        return Principal(account, ALL_LEVELS, "signed")

    assert claims is not None
    string_to_sign = claims_string_to_sign(account, claims.levels, claims.start_ms, claims.end_ms, claims.queue)
    if not _signed_by_any(keys, claims.sig, string_to_sign):
        return AuthFailure("bad signature")
    if claims.start_ms is not None and not now_ms > claims.start_ms:
        return AuthFailure("claims not valid yet")
    if claims.end_ms is not None and not now_ms < claims.end_ms:
        return AuthFailure("claims expired")
    if claims.queue is not None and claims.queue != (queue_name_in_path or "").strip():
        return AuthFailure("claims are for another queue")
    return Principal(account, claims.levels, "query")


def authorize(principal: Principal, level: AuthorizationLevel) -> bool:
    """Does the principal hold the endpoint's level? False is a 403."""
    return level in principal.levels
