"""The mutation operators of generated mutants, each under a short, stable name.

cosmic-ray's core operators, used as a library (each an object with ``mutation_positions(node)``
and ``mutate(node, index)`` over a parso tree): its binary, comparison and unary operator
replacements (named ``Binary_Add_Sub``, ``Compare_Lt_LtE``, ``Unary_USub_UAdd`` here), the
boolean and keyword replacements, ``NumberReplacer``, ``ExceptionReplacer``,
``ZeroIterationForLoop``, ``RemoveDecorator``; an operator that needs constructor arguments
(``VariableReplacer``, ``VariableInserter``) is left out. Beside them, three of the lab's own,
in the same shape, for the mistakes a queue's asynchronous code makes that cosmic-ray has no
operator for:

- ``DropAwait``: ``await f(x)`` becomes ``f(x)`` (the coroutine is made and never run);
- ``RemoveStatement``: a call statement (``self.journal.remove()``, ``await send(...)``)
  becomes ``pass``;
- ``SwapArguments``: two adjacent positional arguments of a call change places.

A name is the operator's identity in a generated mutant's name, so it must not change.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterator

import parso.python.tree as tree
from cosmic_ray.operators.operator import Example, Operator
from cosmic_ray.plugins import get_operator, operator_names

Position = tuple[tuple[int, int], tuple[int, int]]
#: cosmic-ray's long family names, and the short ones used here
_SHORT = {"ReplaceBinaryOperator": "Binary", "ReplaceComparisonOperator": "Compare", "ReplaceUnaryOperator": "Unary"}


def _span(node: Any) -> Position:
    return (node.start_pos, node.end_pos)


class DropAwait(Operator):
    """``await x`` -> ``x``: the awaited thing is made but never waited for."""

    def mutation_positions(self, node: Any) -> Iterator[Position]:
        if node.type in ("atom_expr", "power") and _is_keyword(node.children[0], "await"):
            yield _span(node.children[0])

    def mutate(self, node: Any, index: int) -> Any:
        awaited, rest = node.children[0], node.children[1:]
        rest[0].get_first_leaf().prefix = awaited.prefix  # the await's leading blank (an indent) stays
        if len(rest) == 1:
            rest[0].parent = node.parent
            return rest[0]
        node.children = rest
        return node

    @classmethod
    def examples(cls) -> tuple[Example, ...]:
        return (Example("async def f():\n    await g(1)\n", "async def f():\n    g(1)\n"),
                Example("async def f():\n    x = await y\n", "async def f():\n    x = y\n"))


class RemoveStatement(Operator):
    """A call statement (its value unused: ``f(x)``, ``await f(x)``, ``obj.m()``) -> ``pass``."""

    def mutation_positions(self, node: Any) -> Iterator[Position]:
        if node.parent is not None and node.parent.type == "simple_stmt" and _is_call(node):
            yield _span(node)

    def mutate(self, node: Any, index: int) -> Any:
        replacement = tree.Keyword("pass", node.start_pos, prefix=node.get_first_leaf().prefix)
        replacement.parent = node.parent
        return replacement

    @classmethod
    def examples(cls) -> tuple[Example, ...]:
        return (Example("def f():\n    g(1)\n    return 2\n", "def f():\n    pass\n    return 2\n"),
                Example("async def f():\n    await self.h()\n", "async def f():\n    pass\n"))


class SwapArguments(Operator):
    """``f(a, b)`` -> ``f(b, a)``: each pair of adjacent positional arguments of a call."""

    def mutation_positions(self, node: Any) -> Iterator[Position]:
        for first, second in _adjacent_positionals(node):
            if first.get_code(include_prefix=False) != second.get_code(include_prefix=False):
                yield (first.start_pos, second.end_pos)

    def mutate(self, node: Any, index: int) -> Any:
        pairs = [pair for pair in _adjacent_positionals(node)
                 if pair[0].get_code(include_prefix=False) != pair[1].get_code(include_prefix=False)]
        first, second = pairs[index]
        i, j = node.children.index(first), node.children.index(second)
        a, b = first.get_first_leaf(), second.get_first_leaf()
        a.prefix, b.prefix = b.prefix, a.prefix  # the blanks (a line break, an indent) stay where they were
        node.children[i], node.children[j] = second, first
        return node

    @classmethod
    def examples(cls) -> tuple[Example, ...]:
        return (Example("f(a, b, k=1)", "f(b, a, k=1)"),
                Example("f(a, b, c)", "f(a, c, b)", occurrence=1),
                Example("f(a, a)", "f(a, a)"))


def _is_keyword(node: Any, word: str) -> bool:
    return isinstance(node, tree.Keyword) and node.value == word


def _is_call(node: Any) -> bool:
    """An expression whose last step is a call: ``f(x)``, ``a.b(c)``, ``await a.b()``."""
    if node.type not in ("atom_expr", "power"):
        return False
    last = node.children[-1]
    return last.type == "trailer" and last.children[0].type == "operator" and last.children[0].value == "("


def _adjacent_positionals(node: Any) -> list[tuple[Any, Any]]:
    """The adjacent pairs of plain positional arguments of a call's argument list (not
    ``k=v``, ``*a``, ``**k``, nor a generator argument)."""
    if node.type != "arglist" or node.parent is None or node.parent.type != "trailer":
        return []
    if node.parent.children[0].value != "(":
        return []
    args = [child for child in node.children if not (child.type == "operator" and child.value == ",")]
    return [(a, b) for a, b in zip(args, args[1:]) if a.type != "argument" and b.type != "argument"]


OURS: dict[str, type[Operator]] = {"DropAwait": DropAwait, "RemoveStatement": RemoveStatement,
                                   "SwapArguments": SwapArguments}


def short_name(cosmic_name: str) -> str:
    """``core/ReplaceBinaryOperator_Add_Sub`` -> ``Binary_Add_Sub``; ``core/NumberReplacer`` -> ``NumberReplacer``."""
    name = cosmic_name.removeprefix("core/")
    family, _, rest = name.partition("_")
    return f"{_SHORT[family]}_{rest}" if family in _SHORT and rest else name


def family(name: str) -> str:
    """The operator's family (``Binary``, ``Compare``, ``Unary``, else its own name): what a
    sample spreads over, so eleven replacements of one ``+`` do not crowd out the rest."""
    return name.split("_", 1)[0]


@functools.cache
def _factories() -> dict[str, Callable[[], Operator]]:
    found: dict[str, Callable[[], Operator]] = {}
    for cosmic_name in operator_names():
        if not cosmic_name.startswith("core/"):
            continue  # another provider's operators: not part of the stable set
        cls = get_operator(cosmic_name)
        if cls.arguments():
            continue  # VariableReplacer, VariableInserter: they need arguments to be made
        found[short_name(cosmic_name)] = cls
    found.update(OURS)
    return found


def names() -> list[str]:
    """Every operator's name, in a fixed order (cosmic-ray's, then the lab's own)."""
    return list(_factories())


@functools.cache
def operator(name: str) -> Operator:
    """The operator called ``name`` (one object per process); KeyError if there is none."""
    return _factories()[name]()
