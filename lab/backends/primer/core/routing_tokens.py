"""Primer's routing DSL, its words: the tokenizer that cuts rule text into tokens.

The language's keywords and the tokens (``Token``) of rule text, each rule ended by an
``end`` token (a newline, ``;``, a comment, the end of the text); ``RuleError`` (line and
column) for a character, number or string the language does not know. The parser
(``routing_parser``) reads these tokens; ``routing`` holds the rule set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KEYWORDS = frozenset({"route", "when", "to", "drop", "and", "or", "not", "contains", "matches", "in",
                      "true", "false", "null", "size", "queue", "body", "json"})
ORDERING = ("<", "<=", ">", ">=")
COMPARISONS = ("==", "!=") + ORDERING
VALUE_WORDS = ("size", "queue", "body", "true", "false", "null")
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_NOT_A_NUMBER = re.compile(r"[A-Za-z0-9_.]*")  # what glues to a number's digits: 10kb, 1.2.3
_JSON_KEY = re.compile(r"\.([A-Za-z0-9_-]+)")


class RuleError(ValueError):
    """A rule set that cannot be parsed: where (1-based line and column) and what is wrong."""

    def __init__(self, line: int, column: int, message: str):
        super().__init__(f"line {line}, column {column}: {message}")
        self.line = line
        self.column = column
        self.message = message


# ---------------------------------------------------------------------------- tokens

@dataclass(frozen=True)
class Token:
    kind: str  # word, json, string, number, symbol, end (of a rule: newline, ``;``, comment, text)
    value: Any
    line: int
    column: int
    start: int  # offsets into the text, for the rule's source and error messages
    stop: int

    def describe(self) -> str:
        if self.kind == "string":
            shown = self.value if len(self.value) <= 30 else self.value[:27] + "..."
            return json.dumps(shown)
        if self.kind == "json":
            return ".".join(("json",) + self.value)
        return str(self.value)


def tokenize(text: str) -> list[Token]:
    """The tokens of ``text``, each rule ended by an ``end`` token; RuleError on a bad character,
    number or string."""
    tokens: list[Token] = []
    i, line, line_start, n = 0, 1, 0, len(text)

    def token(kind: str, value: Any, start: int, stop: int) -> None:
        tokens.append(Token(kind, value, line, start - line_start + 1, start, stop))

    def fail(at: int, message: str) -> RuleError:
        return RuleError(line, at - line_start + 1, message)

    while i < n:
        c = text[i]
        if c in "\n#":  # a comment ends its line's rule where it starts
            token("end", "end of line", i, i)
            stop = text.find("\n", i)
            i = n if stop < 0 else stop + 1
            line, line_start = line + 1, i
        elif c in " \t\r":
            i += 1
        elif c == ";":
            token("end", ";", i, i + 1)
            i += 1
        elif c == '"':
            value, stop = _string(text, i, fail)
            token("string", value, i, stop)
            i = stop
        elif (number := _NUMBER.match(text, i)) and (c != "-" or number.end() > i + 1):
            stop = number.end()
            if stop < n and (text[stop].isalnum() or text[stop] in "_."):
                whole = _NOT_A_NUMBER.match(text, stop).end()  # type: ignore[union-attr]
                raise fail(i, f"bad number {text[i:whole]}: write digits, e.g. 1024 or 0.5")
            token("number", float(number.group()) if number.group(1) else int(number.group()), i, stop)
            i = stop
        elif word := WORD.match(text, i):
            stop = word.end()
            if word.group() == "json":
                keys = []
                while key := _JSON_KEY.match(text, stop):
                    keys.append(key.group(1))
                    stop = key.end()
                if stop < n and text[stop] == ".":
                    raise fail(stop, "expected a field name after the dot (json.a.b)")
                token("json", tuple(keys), i, stop)
            else:
                token("word", word.group(), i, stop)
            i = stop
        elif text.startswith(("==", "!=", "<=", ">="), i):
            token("symbol", text[i:i + 2], i, i + 2)
            i += 2
        elif c in "<>()[],":
            token("symbol", c, i, i + 1)
            i += 1
        else:
            hints = {"=": ": write == to compare", "!": ": write != or not", "&": ": write and",
                     "|": ": write or", "'": ": strings are in double quotes"}
            raise fail(i, f"unexpected character {c!r}{hints.get(c, '')}")
    token("end", "end of text", n, n)
    return tokens


def _string(text: str, start: int, fail: Callable[[int, str], RuleError]) -> tuple[str, int]:
    """The value of the string opening at ``start`` and the offset after its closing quote."""
    out: list[str] = []
    i = start + 1
    while True:
        if i >= len(text) or text[i] == "\n":
            raise fail(start, "unterminated string: close it with \" on the same line")
        c = text[i]
        if c == '"':
            return "".join(out), i + 1
        if c == "\\":
            escaped = text[i + 1:i + 2]
            if escaped not in ('"', "\\"):
                raise fail(i, f"unknown escape \\{escaped} in a string: only \\\" and \\\\ are known")
            out.append(escaped)
            i += 2
        else:
            out.append(c)
            i += 1
