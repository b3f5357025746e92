"""Primer's routing DSL, its tree: the nodes a parsed rule is made of, and how they evaluate.

A rule (``Rule``) is a queue glob, an optional condition and a target (or drop); a
condition is a tree of frozen dataclasses (``Node``) evaluated against one put
(``Message``: its queue, its payload, the body and JSON made once, when asked). Only
``true`` is true: a number, a string or null is no condition that holds. A user function
that raises (``FunctionFailed``) or a target that is no queue name (``BadTarget``) makes
the rule fail at route time; ``routing.Routes`` counts it and tries the next rule.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lab.backends.primer.core.config import NAME

NAME_RULE = "use 1 to 200 of A-Z a-z 0-9 . _ -"


# ---------------------------------------------------------------------------- the tree

class FunctionFailed(Exception):
    """A user function raised while a rule was evaluated."""


class Message:
    """What a condition can read of one put; the body and the JSON are made once, when asked."""

    _UNREAD = object()

    def __init__(self, queue: str, payload: bytes):
        self.queue = queue
        self.payload = payload
        self._body: Any = self._UNREAD
        self._json: Any = self._UNREAD

    @property
    def body(self) -> str:
        if self._body is self._UNREAD:
            self._body = bytes(self.payload).decode("utf-8", errors="replace")
        return self._body

    @property
    def json(self) -> Any:
        if self._json is self._UNREAD:
            try:
                self._json = json.loads(bytes(self.payload))
            except (ValueError, RecursionError):  # not JSON (or not UTF-8): every field is null
                self._json = None
        return self._json


def _category(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__  # str, list, dict


def _equal(a: Any, b: Any) -> bool:
    # true != 1 here, unlike Python: a JSON true is no number
    return _category(a) == _category(b) and a == b


@dataclass(frozen=True)
class Span:
    """Where a node is in the rules: its first character and its source text."""

    line: int
    column: int
    text: str


@dataclass(frozen=True)
class Node:
    """A node of a condition; ``kind`` is its static type (number, string, bool, null) or None
    when only the message can tell (a JSON field, a function's result)."""

    where: Span = field(compare=False, repr=False)

    @property
    def kind(self) -> str | None:
        return None

    def evaluate(self, message: Message) -> Any:
        raise NotImplementedError


@dataclass(frozen=True)
class Condition(Node):
    """A node that is true or false."""

    @property
    def kind(self) -> str | None:
        return "bool"


@dataclass(frozen=True)
class Literal(Node):
    value: Any = None

    @property
    def kind(self) -> str | None:
        return {"None": "null", "True": "bool", "False": "bool", "str": "string"}.get(
            _category(self.value), _category(self.value))

    def evaluate(self, message: Message) -> Any:
        return self.value


@dataclass(frozen=True)
class Field(Node):
    name: str = ""  # size, queue or body

    @property
    def kind(self) -> str | None:
        return "number" if self.name == "size" else "string"

    def evaluate(self, message: Message) -> Any:
        if self.name == "size":
            return len(message.payload)
        return message.queue if self.name == "queue" else message.body


@dataclass(frozen=True)
class JsonField(Node):
    keys: tuple[str, ...] = ()

    def evaluate(self, message: Message) -> Any:
        value = message.json
        for key in self.keys:
            if isinstance(value, dict):
                value = value.get(key)
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return None
        return value


@dataclass(frozen=True)
class Call(Node):
    name: str = ""
    function: Callable[..., Any] = field(default=None, compare=False)  # type: ignore[assignment]
    arguments: tuple[Node, ...] = ()

    def evaluate(self, message: Message) -> Any:
        values = [argument.evaluate(message) for argument in self.arguments]
        try:
            return self.function(*values)
        except Exception as error:  # the embedder's code: any failure only unmatches the rule
            raise FunctionFailed(f"{self.name}() raised {type(error).__name__}: {error}") from error


@dataclass(frozen=True)
class Compare(Condition):
    op: str = "=="
    left: Node = field(default=None)  # type: ignore[assignment]
    right: Node = field(default=None)  # type: ignore[assignment]

    def evaluate(self, message: Message) -> bool:
        a, b = self.left.evaluate(message), self.right.evaluate(message)
        if "null" in (self.left.kind, self.right.kind):  # == null / != null: the test for a missing field
            return (a is None and b is None) == (self.op == "==")
        if a is None or b is None:
            return False
        if self.op == "==":
            return _equal(a, b)
        if self.op == "!=":
            return not _equal(a, b)
        if _category(a) != _category(b) or _category(a) not in ("number", "str"):
            return False
        return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[self.op]


@dataclass(frozen=True)
class Contains(Condition):
    left: Node
    right: Node

    def evaluate(self, message: Message) -> bool:
        whole, part = self.left.evaluate(message), self.right.evaluate(message)
        if isinstance(whole, str):
            return isinstance(part, str) and part in whole
        if isinstance(whole, list):
            return part is not None and any(_equal(item, part) for item in whole)
        if isinstance(whole, dict):  # a JSON object contains its keys
            return isinstance(part, str) and part in whole
        return False


@dataclass(frozen=True)
class Matches(Condition):
    left: Node
    regex: re.Pattern[str] = field(compare=False)

    def evaluate(self, message: Message) -> bool:
        text = self.left.evaluate(message)
        return isinstance(text, str) and self.regex.search(text) is not None


@dataclass(frozen=True)
class In(Condition):
    left: Node
    items: tuple[Node, ...] = ()

    def evaluate(self, message: Message) -> bool:
        value = self.left.evaluate(message)
        return value is not None and any(_equal(value, item.evaluate(message)) for item in self.items)


@dataclass(frozen=True)
class Not(Condition):
    operand: Node

    def evaluate(self, message: Message) -> bool:
        return self.operand.evaluate(message) is not True


@dataclass(frozen=True)
class Logic(Condition):
    op: str = "and"
    operands: tuple[Node, ...] = ()

    def evaluate(self, message: Message) -> bool:
        # only true is true: a number, a string or null is no condition that holds
        if self.op == "and":
            return all(operand.evaluate(message) is True for operand in self.operands)
        return any(operand.evaluate(message) is True for operand in self.operands)


# ---------------------------------------------------------------------------- rules

NO_MATCH = object()


class BadTarget(Exception):
    """A target that is no valid queue name once its placeholders are filled."""


@dataclass(frozen=True)
class Rule:
    """One ``route`` rule; ``text`` is its source, ``target`` None means drop."""

    text: str
    line: int
    pattern: str
    target: str | None
    condition: Node | None = field(repr=False)
    glob: re.Pattern[str] = field(repr=False, compare=False)
    #: the target in pieces: a literal, or the glob's group number (0: the whole queue name)
    parts: tuple[str | int, ...] = field(default=(), repr=False)

    def apply(self, message: Message) -> Any:
        """The target (None: drop) if the rule matches, else ``NO_MATCH``."""
        found = self.glob.fullmatch(message.queue)
        if found is None or (self.condition is not None and self.condition.evaluate(message) is not True):
            return NO_MATCH
        if self.target is None:
            return None
        target = "".join(part if isinstance(part, str) else found.group(part) for part in self.parts)
        if not is_queue_name(target):
            raise BadTarget(f"target {target!r} is no queue name ({NAME_RULE})")
        return target


def is_queue_name(name: str) -> bool:
    return bool(NAME.fullmatch(name)) and name not in (".", "..")
