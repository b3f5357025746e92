"""CassieQ's refusals: the small exception types the core raises and the HTTP layer maps.

Each carries the original's error entity (spec §1): a ``reason`` (``Error``, ``NotFound``,
``Conflict``), the ``operation`` that failed and a ``message``; ``to_json`` is that body.
Input that cannot be parsed at all (a malformed pop receipt, a bad name, bad options) is a
``ValueError`` subclass instead, which the HTTP layer answers with 400 or 422.
"""

from __future__ import annotations

from typing import Any


class CassieQError(Exception):
    """A refusal with the original's error entity."""

    reason = "Error"

    def __init__(self, operation: str, message: str, queue_name: str | None = None):
        super().__init__(message)
        self.operation = operation
        self.message = message
        self.queue_name = queue_name

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"reason": self.reason, "operation": self.operation, "message": self.message}
        if self.queue_name is not None:
            body["queueName"] = self.queue_name
        return body


class NotFound(CassieQError):
    """No Active queue by that name (HTTP 404)."""

    reason = "NotFound"

    @classmethod
    def queue(cls, operation: str, queue_name: str) -> "NotFound":
        return cls(operation, f"The requested queue '{queue_name}' was not found.", queue_name)


class Conflict(CassieQError):
    """A compare-and-set the caller asked for lost (HTTP 409)."""

    reason = "Conflict"

    @classmethod
    def queue_exists(cls, queue_name: str) -> "Conflict":
        return cls("CreateQueue", f"A queue named '{queue_name}' already exists.", queue_name)

    @classmethod
    def stale_update(cls) -> "Conflict":
        return cls("UpdateMessage", "Pop receipt is stale.")

    @classmethod
    def ack_lost(cls) -> "Conflict":
        return cls("AckMessage", "The message is already being reprocessed.")


class QueueAlreadyDeleting(CassieQError):
    """Another delete of the same queue won the mark (the original answers 500)."""

    def __init__(self, queue_name: str):
        super().__init__("DeleteQueue", f"The queue '{queue_name}' is already being deleted.", queue_name)


class ExistingMonoton(CassieQError):
    """A message insert found its id taken (CAS-2 did not apply; the original answers 500)."""

    def __init__(self, queue_id: str, index: int):
        super().__init__("putMessage", f"Tried to insert a message with the monoton value of '{index}' "
                                       f"which already exists in '{queue_id}'.")
        self.queue_id, self.index = queue_id, index

    def __reduce__(self) -> tuple:  # its own arguments, not the message: it crosses process boundaries whole
        return type(self), (self.queue_id, self.index)


class BadPopReceipt(ValueError):
    """A pop receipt that does not decode to ``<monoton>:<version>:<tag>`` (the original's 500;
    the lab answers it as a client error)."""


class InvalidName(ValueError):
    """An account, queue or key name outside ``[a-zA-Z_\\-0-9\\.]+``."""


class InvalidOptions(ValueError):
    """Queue create options that cannot make a queue (a missing name, a bucket size below 1, ...)."""
