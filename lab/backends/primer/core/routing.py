"""Primer's message mapping: the routing DSL that decides which queue a put really goes to.

This room is the rule set (``Routes``) and the functions every rule set knows. Rule text
(``route PATTERN [when EXPR] to (STRING | drop)``, one rule per line or per ``;``) is cut
into tokens (``routing_tokens``), parsed by recursive descent (``routing_parser``) into a
small tree of dataclasses (``routing_tree``), and a message is routed by walking it: the
first rule whose glob matches the queue and whose condition holds wins; no rule matching
keeps the queue. Routing is one step: a target is never routed again, so no rule set can loop.

It is pure: no clock, no I/O. Parse errors are ``RuleError`` (line and column); a rule that
fails at route time (a user function raises, a target is not a valid queue name) does not
match and is counted in ``Routes.errors`` — a message is never lost because a rule failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lab.backends.primer.core.routing_parser import Parser
from lab.backends.primer.core.routing_tokens import KEYWORDS, WORD, tokenize
from lab.backends.primer.core.routing_tree import NO_MATCH, BadTarget, FunctionFailed, Message, Rule


# ---------------------------------------------------------------------------- built-in functions

def _len(value: Any) -> int | None:
    return len(value) if isinstance(value, (str, list, dict)) else None


def _lower(text: Any) -> str | None:
    return text.lower() if isinstance(text, str) else None


def _upper(text: Any) -> str | None:
    return text.upper() if isinstance(text, str) else None


def _startswith(text: Any, prefix: Any) -> bool | None:
    return text.startswith(prefix) if isinstance(text, str) and isinstance(prefix, str) else None


def _int(value: Any) -> int | None:
    try:
        if isinstance(value, (int, float)):
            return int(value)
        if isinstance(value, str):
            return int(value.strip())
    except (ValueError, OverflowError):  # "abc", nan, inf
        pass
    return None


#: The functions every rule set knows; the embedder's ``functions`` add to them (or replace one).
#: They return null for a value they do not apply to, so a missing field never counts as an error.
DEFAULT_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "len": _len, "lower": _lower, "upper": _upper, "startswith": _startswith, "int": _int}


class Routes:
    """A parsed rule set: ``route(queue, payload)`` is the queue a put goes to (None: drop it).

    ``errors`` counts rules that failed at route time and so did not match (a function raised,
    a target was no queue name); ``last_error`` says what the latest was.
    """

    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self.errors = 0
        self.last_error: str | None = None

    @classmethod
    def parse(cls, text: str, functions: Mapping[str, Callable[..., Any]] | None = None) -> Routes:
        """The rules of ``text``; RuleError (line, column) for the first mistake. ``functions``
        (name -> callable) extend ``DEFAULT_FUNCTIONS``; ValueError for a name a rule cannot call,
        TypeError for a value that is not callable."""
        known = {**DEFAULT_FUNCTIONS, **(functions or {})}
        for name, function in known.items():
            if not isinstance(name, str) or not WORD.fullmatch(name) or name in KEYWORDS:
                raise ValueError(f"function name {name!r}: use letters, digits and _, not a keyword")
            if not callable(function):
                raise TypeError(f"function {name!r} is not callable")
        rules: list[Rule] = []
        start = 0
        tokens = tokenize(text)
        for i, token in enumerate(tokens):
            if token.kind == "end":
                if i > start:
                    rules.append(Parser(tokens[start:i + 1], text, known).rule())
                start = i + 1
        return cls(rules)

    def route(self, queue: str, payload: bytes) -> str | None:
        """The queue a message put into ``queue`` goes to: the first matching rule's target,
        None if that rule drops it, ``queue`` if no rule matches. The target is not routed again."""
        message = Message(queue, payload)
        for rule in self.rules:
            try:
                target = rule.apply(message)
            except (FunctionFailed, BadTarget) as error:
                self.errors += 1
                self.last_error = f"line {rule.line} ({rule.text}): {error}"
                continue
            if target is not NO_MATCH:
                return target
        return queue
