"""Primer's message mapping: the routing DSL that decides which queue a put really goes to.

This room parses rule text (``route PATTERN [when EXPR] to (STRING | drop)``, one rule per
line or per ``;``) with a hand-written tokenizer and recursive-descent parser into a small
tree of dataclasses, and routes a message by walking it: the first rule whose glob matches
the queue and whose condition holds wins; no rule matching keeps the queue. Routing is one
step: a target is never routed again, so no rule set can loop.

It is pure: no clock, no I/O. Parse errors are ``RuleError`` (line and column); a rule that
fails at route time (a user function raises, a target is not a valid queue name) does not
match and is counted in ``Routes.errors`` — a message is never lost because a rule failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.backends.primer.core.config import NAME

KEYWORDS = frozenset({"route", "when", "to", "drop", "and", "or", "not", "contains", "matches", "in",
                      "true", "false", "null", "size", "queue", "body", "json"})
ORDERING = ("<", "<=", ">", ">=")
COMPARISONS = ("==", "!=") + ORDERING
VALUE_WORDS = ("size", "queue", "body", "true", "false", "null")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_NOT_A_NUMBER = re.compile(r"[A-Za-z0-9_.]*")  # what glues to a number's digits: 10kb, 1.2.3
_JSON_KEY = re.compile(r"\.([A-Za-z0-9_-]+)")
_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_NAME_RULE = "use 1 to 200 of A-Z a-z 0-9 . _ -"


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
        elif word := _WORD.match(text, i):
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


# ---------------------------------------------------------------------------- the tree

class _FunctionFailed(Exception):
    """A user function raised while a rule was evaluated."""


class _Message:
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

    def evaluate(self, message: _Message) -> Any:
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

    def evaluate(self, message: _Message) -> Any:
        return self.value


@dataclass(frozen=True)
class Field(Node):
    name: str = ""  # size, queue or body

    @property
    def kind(self) -> str | None:
        return "number" if self.name == "size" else "string"

    def evaluate(self, message: _Message) -> Any:
        if self.name == "size":
            return len(message.payload)
        return message.queue if self.name == "queue" else message.body


@dataclass(frozen=True)
class JsonField(Node):
    keys: tuple[str, ...] = ()

    def evaluate(self, message: _Message) -> Any:
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

    def evaluate(self, message: _Message) -> Any:
        values = [argument.evaluate(message) for argument in self.arguments]
        try:
            return self.function(*values)
        except Exception as error:  # the embedder's code: any failure only unmatches the rule
            raise _FunctionFailed(f"{self.name}() raised {type(error).__name__}: {error}") from error


@dataclass(frozen=True)
class Compare(Condition):
    op: str = "=="
    left: Node = field(default=None)  # type: ignore[assignment]
    right: Node = field(default=None)  # type: ignore[assignment]

    def evaluate(self, message: _Message) -> bool:
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
    left: Node = field(default=None)  # type: ignore[assignment]
    right: Node = field(default=None)  # type: ignore[assignment]

    def evaluate(self, message: _Message) -> bool:
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
    left: Node = field(default=None)  # type: ignore[assignment]
    regex: re.Pattern[str] = field(default=None, compare=False)  # type: ignore[assignment]

    def evaluate(self, message: _Message) -> bool:
        text = self.left.evaluate(message)
        return isinstance(text, str) and self.regex.search(text) is not None


@dataclass(frozen=True)
class In(Condition):
    left: Node = field(default=None)  # type: ignore[assignment]
    items: tuple[Node, ...] = ()

    def evaluate(self, message: _Message) -> bool:
        value = self.left.evaluate(message)
        return value is not None and any(_equal(value, item.evaluate(message)) for item in self.items)


@dataclass(frozen=True)
class Not(Condition):
    operand: Node = field(default=None)  # type: ignore[assignment]

    def evaluate(self, message: _Message) -> bool:
        return self.operand.evaluate(message) is not True


@dataclass(frozen=True)
class Logic(Condition):
    op: str = "and"
    operands: tuple[Node, ...] = ()

    def evaluate(self, message: _Message) -> bool:
        # only true is true: a number, a string or null is no condition that holds
        if self.op == "and":
            return all(operand.evaluate(message) is True for operand in self.operands)
        return any(operand.evaluate(message) is True for operand in self.operands)


# ---------------------------------------------------------------------------- rules

_NO_MATCH = object()


class _BadTarget(Exception):
    """A target that is no valid queue name once its placeholders are filled."""


@dataclass(frozen=True)
class Rule:
    """One ``route`` rule; ``text`` is its source, ``target`` None means drop."""

    text: str
    line: int
    pattern: str
    target: str | None
    condition: Node | None = field(default=None, repr=False)
    glob: re.Pattern[str] = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    #: the target in pieces: a literal, or the glob's group number (0: the whole queue name)
    parts: tuple[str | int, ...] = field(default=(), repr=False)

    def apply(self, message: _Message) -> Any:
        """The target (None: drop) if the rule matches, else ``_NO_MATCH``."""
        found = self.glob.fullmatch(message.queue)
        if found is None or (self.condition is not None and self.condition.evaluate(message) is not True):
            return _NO_MATCH
        if self.target is None:
            return None
        target = "".join(part if isinstance(part, str) else found.group(part) for part in self.parts)
        if not _is_queue_name(target):
            raise _BadTarget(f"target {target!r} is no queue name ({_NAME_RULE})")
        return target


def _is_queue_name(name: str) -> bool:
    return bool(NAME.fullmatch(name)) and name not in (".", "..")


def _glob(pattern: str) -> tuple[str, int]:
    """The regex of an fnmatch-style glob, each ``*`` a group taking as little as it can; and
    how many ``*`` it has."""
    out: list[str] = []
    stars, i = 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "*":
            out.append("(.*?)")
            stars += 1
        elif c == "?":
            out.append(".")
        elif c == "[" and (close := _class_end(pattern, i)) > 0:
            body = pattern[i + 1:close].replace("\\", "\\\\")
            body = "^" + body[1:] if body.startswith("!") else ("\\" + body if body.startswith("^") else body)
            out.append(f"[{body}]")
            i = close
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out), stars


def _class_end(pattern: str, start: int) -> int:
    """The offset of the ``]`` closing the class opened at ``start`` (-1: none, a literal ``[``)."""
    i = start + 1
    if i < len(pattern) and pattern[i] == "!":
        i += 1
    if i < len(pattern) and pattern[i] == "]":  # a leading ] is a member, as in fnmatch
        i += 1
    return pattern.find("]", i)


class _Parser:
    """Recursive descent over one rule's tokens."""

    def __init__(self, tokens: list[Token], text: str, functions: Mapping[str, Callable[..., Any]]):
        self.tokens = tokens
        self.i = 0
        self.text = text
        self.functions = functions

    # -- helpers
    def peek(self) -> Token:
        return self.tokens[self.i]

    def advance(self) -> Token:
        token = self.tokens[self.i]
        self.i += 1
        return token

    def at(self, value: str, kind: str = "word") -> bool:
        return self.peek().kind == kind and self.peek().value == value

    def fail(self, at: Token | Span, message: str) -> RuleError:
        return RuleError(at.line, at.column, message)

    def expected(self, what: str) -> RuleError:
        token = self.peek()
        found = token.describe()
        if token.kind == "word" and token.value.lower() in KEYWORDS and token.value not in KEYWORDS:
            found += " (keywords are lower case)"
        return self.fail(token, f"expected {what}, found {found}")

    def expect(self, value: str, kind: str = "word") -> Token:
        if not self.at(value, kind):
            raise self.expected(value)
        return self.advance()

    def source(self, first: Token) -> str:
        return self.text[first.start:self.tokens[self.i - 1].stop]

    def span(self, first: Token) -> Span:
        """The span from ``first`` to the last token read."""
        return Span(first.line, first.column, self.source(first))

    # -- rule = "route" STRING ["when" expr] "to" (STRING | "drop")
    def rule(self) -> Rule:
        first = self.expect("route")
        if self.peek().kind != "string":
            raise self.expected("a queue pattern in double quotes")
        pattern_token = self.advance()
        if not pattern_token.value:
            raise self.fail(pattern_token, "empty pattern: it matches no queue (\"*\" matches every queue)")
        regex, stars = _glob(pattern_token.value)
        try:
            glob = re.compile(regex, re.DOTALL)
        except re.error as error:
            raise self.fail(pattern_token, f"bad pattern {pattern_token.describe()}: {error}") from None
        condition = None
        if self.at("when"):
            self.advance()
            condition = self.condition(self.expression())
        elif not self.at("to"):
            raise self.expected("when or to")
        self.expect("to")
        target_token = self.peek()
        if self.at("drop"):
            self.advance()
            target, parts = None, ()
        elif target_token.kind == "string":
            self.advance()
            target, parts = target_token.value, self.target(target_token, stars)
        else:
            raise self.expected("a target queue in double quotes or drop")
        if self.peek().kind != "end":
            raise self.fail(self.peek(), f"unexpected {self.peek().describe()} after the target: "
                                         "one rule per line, or separate rules with ;")
        return Rule(self.source(first), first.line, pattern_token.value, target, condition, glob, parts)

    def target(self, token: Token, stars: int) -> tuple[str | int, ...]:
        """The target's pieces; RuleError if it can never be a queue name."""
        text, parts, last = token.value, [], 0
        for placeholder in _PLACEHOLDER.finditer(text):
            parts.append(text[last:placeholder.start()])
            name = placeholder.group(1)
            if name == "queue":
                parts.append(0)
            elif name.isdigit() and 1 <= int(name) <= stars:
                parts.append(int(name))
            else:
                star_text = f"the pattern has {stars} *" if stars else "the pattern has no *"
                raise self.fail(token, f"unknown placeholder {{{name}}} in target: use {{queue}} or "
                                       f"{{1}}... one per * ({star_text})")
            last = placeholder.end()
        parts.append(text[last:])
        literal = "".join(part for part in parts if isinstance(part, str))
        if not _NAME_CHARS.fullmatch(literal) or (len(parts) == 1 and not _is_queue_name(text)):
            raise self.fail(token, f"bad target queue name {token.describe()}: {_NAME_RULE}")
        return tuple(part for part in parts if part != "")

    # -- expr = and_expr {"or" and_expr}; and_expr = not_expr {"and" not_expr}
    def expression(self) -> Node:
        return self.logic("or", self.conjunction)

    def conjunction(self) -> Node:
        return self.logic("and", self.negation)

    def logic(self, op: str, operand: Callable[[], Node]) -> Node:
        first = self.peek()
        node = operand()
        if not self.at(op):
            return node
        operands = [self.condition(node)]
        while self.at(op):
            self.advance()
            operands.append(self.condition(operand()))
        return Logic(self.span(first), op, tuple(operands))

    # -- not_expr = "not" not_expr | comparison
    def negation(self) -> Node:
        if self.at("not"):
            first = self.advance()
            operand = self.condition(self.negation())
            return Not(self.span(first), operand)
        return self.comparison()

    # -- comparison = operand [(COMPARE operand) | "contains" operand | "matches" STRING | "in" list]
    def comparison(self) -> Node:
        first = self.peek()
        left = self.operand()
        token = self.peek()
        if token.kind == "symbol" and token.value in COMPARISONS:
            self.advance()
            right = self.operand()
            self.check_comparable(left, right, token)
            node: Node = Compare(self.span(first), token.value, left, right)
        elif self.at("contains"):
            self.advance()
            if left.kind not in (None, "string"):
                raise self.fail(left.where, f"{left.where.text} is a {left.kind}: contains looks into text "
                                            "(body, queue) or a JSON list")
            right = self.operand()
            node = Contains(self.span(first), left, right)
        elif self.at("matches"):
            self.advance()
            if left.kind not in (None, "string"):
                raise self.fail(left.where, f"{left.where.text} is a {left.kind}: matches needs text")
            if self.peek().kind != "string":
                raise self.expected("a regular expression in double quotes after matches")
            regex_token = self.advance()
            try:
                regex = re.compile(regex_token.value)
            except re.error as error:
                raise self.fail(regex_token, f"bad regular expression {regex_token.describe()}: {error}") from None
            node = Matches(self.span(first), left, regex)
        elif self.at("in"):
            self.advance()
            items = self.items()
            node = In(self.span(first), left, items)
        else:
            return left
        after = self.peek()
        if after.kind == "symbol" and after.value in COMPARISONS:
            raise self.fail(after, f"unexpected {after.value}: comparisons do not chain, join them with and")
        return node

    def items(self) -> tuple[Node, ...]:
        if not self.at("[", "symbol"):
            raise self.expected("a list [ ... ] after in")
        self.advance()
        items: list[Node] = []
        while not self.at("]", "symbol"):
            items.append(self.operand())
            if not self.at("]", "symbol"):
                if not self.at(",", "symbol"):
                    raise self.expected(", or ]")
                self.advance()
        self.advance()
        return tuple(items)

    def check_comparable(self, left: Node, right: Node, op: Token) -> None:
        kinds = (left.kind, right.kind)
        if "null" in kinds and op.value in ORDERING:
            raise self.fail(op, f"{op.value} with null is never true: test a missing field with == null "
                                "or != null")
        if op.value in ORDERING and "bool" in kinds:
            raise self.fail(op, f"{op.value} does not order true and false: use == or !=")
        if None not in kinds and "null" not in kinds and kinds[0] != kinds[1]:
            raise self.fail(left.where, f"{left.where.text} is a {kinds[0]} and {right.where.text} is a "
                                        f"{kinds[1]}: {op.value} can never hold")

    def condition(self, node: Node) -> Node:
        """``node`` if it can be true or false; RuleError for a plain value such as ``size``."""
        if node.kind not in (None, "bool"):
            example = {"number": "size > 0", "string": 'body contains "x"'}.get(node.kind, "size > 0")
            raise self.fail(node.where, f"{node.where.text} is a {node.kind}, not a condition: compare it "
                                        f"(e.g. {example})")
        return node

    # -- operand = size | queue | body | json.a.b | NUMBER | STRING | true | false | null
    #             | NAME "(" [expr {"," expr}] ")" | "(" expr ")"
    def operand(self) -> Node:
        token = self.peek()
        if token.kind in ("string", "number"):
            self.advance()
            return Literal(self.span(token), token.value)
        if token.kind == "json":
            self.advance()
            return JsonField(self.span(token), token.value)
        if token.kind == "symbol" and token.value == "(":
            self.advance()
            inner = self.expression()
            self.expect(")", "symbol")
            return inner
        if token.kind != "word" or (token.value in KEYWORDS and token.value not in VALUE_WORDS):
            raise self.expected("a value (size, queue, body, json.field, a number, a string, a call)")
        self.advance()
        if token.value in VALUE_WORDS:
            if token.value in ("size", "queue", "body"):
                return Field(self.span(token), token.value)
            return Literal(self.span(token), {"true": True, "false": False, "null": None}[token.value])
        if not self.at("(", "symbol"):
            if token.value in self.functions:
                raise self.fail(token, f"{token.value} is a function: call it as {token.value}(...)")
            if token.value.lower() in KEYWORDS:
                raise self.fail(token, f"unknown word {token.value} (keywords are lower case)")
            raise self.fail(token, f"unknown word {token.value}: a value is size, queue, body, json.field, "
                                   "a number, a string, true, false, null or a call name(...)")
        if token.value not in self.functions:
            known = ", ".join(sorted(self.functions))
            raise self.fail(token, f"unknown function {token.value} (known: {known})")
        self.advance()
        arguments: list[Node] = []
        while not self.at(")", "symbol"):
            arguments.append(self.expression())
            if not self.at(")", "symbol"):
                if not self.at(",", "symbol"):
                    raise self.expected(", or )")
                self.advance()
        self.advance()
        return Call(self.span(token), token.value, self.functions[token.value], tuple(arguments))


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
            if not isinstance(name, str) or not _WORD.fullmatch(name) or name in KEYWORDS:
                raise ValueError(f"function name {name!r}: use letters, digits and _, not a keyword")
            if not callable(function):
                raise TypeError(f"function {name!r} is not callable")
        rules: list[Rule] = []
        start = 0
        tokens = tokenize(text)
        for i, token in enumerate(tokens):
            if token.kind == "end":
                if i > start:
                    rules.append(_Parser(tokens[start:i + 1], text, known).rule())
                start = i + 1
        return cls(rules)

    def route(self, queue: str, payload: bytes) -> str | None:
        """The queue a message put into ``queue`` goes to: the first matching rule's target,
        None if that rule drops it, ``queue`` if no rule matches. The target is not routed again."""
        message = _Message(queue, payload)
        for rule in self.rules:
            try:
                target = rule.apply(message)
            except (_FunctionFailed, _BadTarget) as error:
                self.errors += 1
                self.last_error = f"line {rule.line} ({rule.text}): {error}"
                continue
            if target is not _NO_MATCH:
                return target
        return queue
