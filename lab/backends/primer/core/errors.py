"""The errors a Primer node's API raises, each with the HTTP status the wire answers it with."""

from __future__ import annotations


class PrimerError(Exception):
    """A request the node refused; ``status`` is its HTTP status."""

    status = 500


class BadRequest(PrimerError):
    """The request is malformed (a bad name, a bad number, a bad receipt): nothing was written."""

    status = 400


class NotFound(PrimerError):
    """No such log, message or group."""

    status = 404


class Conflict(PrimerError):
    """The request contradicts the cluster's state (a log created twice with other settings)."""

    status = 409


class Unavailable(PrimerError):
    """The node cannot do it now (fewer than W members reachable, the log's chain is cut): retry."""

    status = 503
