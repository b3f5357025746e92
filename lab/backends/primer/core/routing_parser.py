"""Primer's routing DSL, its parser: one rule's tokens into a ``Rule``, by recursive descent.

The grammar is written above each method (``rule``, ``expression``, ``comparison``,
``operand``). Beyond the grammar it refuses what could never hold (a comparison of a number
with a string, ``<`` with null, a plain value as a condition, an unknown function or word,
a target that can never be a queue name), each as a ``RuleError`` at its line and column.
A queue pattern is an fnmatch-style glob whose ``*`` fill the target's ``{1}``, ``{2}``...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from lab.backends.primer.core.routing_tokens import COMPARISONS, KEYWORDS, ORDERING, VALUE_WORDS, RuleError, Token
from lab.backends.primer.core.routing_tree import (NAME_RULE, Call, Compare, Contains, Field, In, JsonField, Literal,
                                                   Logic, Matches, Node, Not, Rule, Span, is_queue_name)

_NAME_CHARS = re.compile(r"[A-Za-z0-9._-]*")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


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


class Parser:
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
        parts: tuple[str | int, ...]
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
        if not _NAME_CHARS.fullmatch(literal) or (len(parts) == 1 and not is_queue_name(text)):
            raise self.fail(token, f"bad target queue name {token.describe()}: {NAME_RULE}")
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
