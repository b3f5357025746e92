"""Primer's routing DSL: every construct, precedence, first match, glob captures, drop, JSON
fields, functions (the built-ins, the embedder's, one that raises) and the parse errors with
their exact line and column."""

from __future__ import annotations

import json

import pytest

from lab.backends.primer.core.routing import DEFAULT_FUNCTIONS, Routes
from lab.backends.primer.core.routing_tokens import RuleError
from tests.test_core_purity import ROOT, forbidden_chains


def route(rules: str, queue: str = "q", payload: bytes = b"", **functions) -> str | None:
    return Routes.parse(rules, functions).route(queue, payload)


def holds(condition: str, queue: str = "q", payload: bytes | str | dict = b"", **functions) -> bool:
    """Whether ``condition`` holds for the message: the rule re-routes it to ``yes``."""
    if isinstance(payload, dict):
        payload = json.dumps(payload)
    if isinstance(payload, str):
        payload = payload.encode()
    return route(f'route "*" when {condition} to "yes"', queue, payload, **functions) == "yes"


# ---------------------------------------------------------------------------- rules and matching

def test_the_examples_of_the_brief_route_as_described():
    routes = Routes.parse('''
        # big orders, urgent messages, archives, hot logs, spam
        route "orders.*" when size > 1024 to "orders-big"
        route "*" when body contains "urgent" and not queue == "urgent" to "urgent"
        route "events.*" to "{queue}.archive"
        route "logs.*" when priority(body) >= 5 to "logs-hot"
        route "spam" to drop
    ''', {"priority": lambda body: body.count("!")})
    assert routes.route("orders.eu", b"x" * 1025) == "orders-big"
    assert routes.route("orders.eu", b"x" * 1024) == "orders.eu"
    assert routes.route("mail", b"this is urgent") == "urgent"
    assert routes.route("urgent", b"this is urgent") == "urgent"  # kept, not re-routed
    assert routes.route("events.click", b"") == "events.click.archive"
    assert routes.route("logs.app", b"fire!!!!!") == "logs-hot"
    assert routes.route("logs.app", b"fine!") == "logs.app"
    assert routes.route("spam", b"buy") is None
    assert routes.route("spammer", b"buy") == "spammer"  # a pattern matches the whole name
    assert [rule.text for rule in routes.rules] == [
        'route "orders.*" when size > 1024 to "orders-big"',
        'route "*" when body contains "urgent" and not queue == "urgent" to "urgent"',
        'route "events.*" to "{queue}.archive"',
        'route "logs.*" when priority(body) >= 5 to "logs-hot"',
        'route "spam" to drop',
    ]
    assert [rule.line for rule in routes.rules] == [3, 4, 5, 6, 7]
    assert routes.errors == 0


def test_no_rules_and_no_match_keep_the_queue():
    assert Routes.parse("").route("q", b"x") == "q"
    assert Routes.parse("# only a comment\n\n  \n;;").rules == []
    assert route('route "other" to "elsewhere"', "q") == "q"


def test_the_first_matching_rule_wins():
    rules = 'route "a*" to "first"\nroute "ab" to "second"\nroute "*" to "third"'
    assert route(rules, "ab") == "first"
    assert route(rules, "b") == "third"
    # a rule whose condition fails lets the next one decide
    rules = 'route "ab" when size > 3 to "big"\nroute "ab" to "small"'
    assert route(rules, "ab", b"12345") == "big"
    assert route(rules, "ab", b"12") == "small"


def test_routing_is_one_step_so_rules_cannot_loop():
    rules = 'route "a" to "b"; route "b" to "a"'
    assert route(rules, "a") == "b"
    assert route(rules, "b") == "a"


def test_semicolons_separate_rules_and_each_keeps_its_own_text_and_line():
    routes = Routes.parse('route "a" to "x"; route "b" to drop  # two rules\n\nroute "c" to "z"')
    assert [(rule.text, rule.line) for rule in routes.rules] == [
        ('route "a" to "x"', 1), ('route "b" to drop', 1), ('route "c" to "z"', 3)]
    assert [routes.route(q, b"") for q in "abcd"] == ["x", None, "z", "d"]


def test_a_semicolon_or_a_hash_inside_a_string_is_text():
    assert route('route "*" when body == "a;b#c" to "yes"', "q", b"a;b#c") == "yes"


def test_drop_is_not_a_queue_named_drop():
    assert route('route "q" to drop', "q") is None
    assert route('route "q" to "drop"', "q") == "drop"


def test_globs_are_fnmatch_style_and_case_sensitive():
    assert route('route "job-?" to "yes"', "job-1") == "yes"
    assert route('route "job-?" to "yes"', "job-12") == "job-12"
    assert route('route "job-[0-4]" to "yes"', "job-3") == "yes"
    assert route('route "job-[0-4]" to "yes"', "job-7") == "job-7"
    assert route('route "job-[!0-4]" to "yes"', "job-7") == "yes"
    assert route('route "Job" to "yes"', "job") == "job"
    assert route('route "a.b" to "yes"', "aXb") == "aXb"  # a dot is a dot, not any character
    assert route('route "[x" to "yes"', "[x") == "yes"  # an unclosed [ is literal, as in fnmatch


def test_targets_take_the_queue_and_the_glob_captures_in_order():
    assert route('route "*.*" to "{2}.{1}"', "orders.eu") == "eu.orders"
    assert route('route "in-*" to "out-{1}-{queue}"', "in-7") == "out-7-in-7"
    # each * takes as little as it can: the last takes the rest
    assert route('route "*.*" to "{1}-{2}"', "a.b.c") == "a-b.c"
    assert route('route "x*" to "y{1}"', "xabc") == "yabc"


def test_a_target_that_is_no_queue_name_after_substitution_does_not_match_and_counts():
    routes = Routes.parse('route "x*" to "{1}"\nroute "*" to "fallback"')
    assert routes.route("xab", b"") == "ab"
    assert routes.route("x", b"") == "fallback"  # {1} is empty
    assert routes.errors == 1
    assert "target '' is no queue name" in routes.last_error
    assert routes.route("x" + "a" * 201, b"") == "fallback"  # {1} has 201 characters
    assert routes.route("x..", b"") == "fallback"  # ".." is no name (it would be a file name)
    assert routes.errors == 3


# ---------------------------------------------------------------------------- operands and operators

def test_size_is_payload_bytes_and_body_is_text_with_errors_replaced():
    assert holds("size == 4", payload="éé")  # two characters of two bytes each
    assert holds("len(body) == 2", payload="éé")
    assert holds('body == "a\ufffdb"', payload=b"a\xffb")
    assert holds('queue == "orders"', queue="orders")


def test_comparisons_on_numbers_and_strings():
    for condition, expected in [
            ("size == 3", True), ("size != 3", False), ("size < 4", True), ("size <= 3", True),
            ("size > 3", False), ("size >= 3", True), ("size > 2.5", True), ("size == -1", False),
            ('queue < "r"', True), ('queue >= "r"', False), ('"b" > "a"', True), ("1 == 1.0", True)]:
        assert holds(condition, queue="q", payload=b"abc") is expected, condition


def test_contains_matches_and_in():
    assert holds('body contains "gen"', payload="urgent")
    assert not holds('body contains "GEN"', payload="urgent")
    assert holds('body matches "^ur.*t$"', payload="urgent")
    assert holds('body matches "ge"', payload="urgent")  # matches searches: anchor with ^ $
    assert not holds('body matches "^ge"', payload="urgent")
    assert holds('queue in ["a", "q", "z"]', queue="q")
    assert not holds('queue in ["a", "z"]', queue="q")
    assert not holds("queue in []", queue="q")
    assert holds("size in [1, 2, 3]", payload="ab")


def test_escapes_in_strings():
    assert holds(r'body == "say \"hi\" \\ bye"', payload='say "hi" \\ bye')


def test_keywords_are_lower_case_and_true_false_null_are_values():
    assert holds("true")
    assert not holds("false")
    assert holds("true == true") and holds("false != true")
    assert holds("not false")


def test_precedence_not_binds_tighter_than_and_which_binds_tighter_than_or():
    # or is lowest: true or (false and false)
    assert holds("true or false and false")
    # with parentheses the meaning changes
    assert not holds("(true or false) and false")
    # not applies to the next term only: (not false) and false
    assert not holds("not false and false")
    assert holds("not (false and false)")
    # not false or false -> (not false) or false
    assert holds("not false or false")
    assert holds("not not true")
    # not covers a whole comparison: not (queue == "q")
    assert not holds('not queue == "q"', queue="q")


def test_and_and_or_short_circuit_so_a_raising_function_on_the_other_side_is_not_called():
    def boom(_: object) -> bool:
        raise RuntimeError("boom")

    routes = Routes.parse('route "*" when true or boom(body) to "yes"', {"boom": boom})
    assert routes.route("q", b"") == "yes" and routes.errors == 0
    routes = Routes.parse('route "*" when false and boom(body) to "yes"', {"boom": boom})
    assert routes.route("q", b"") == "q" and routes.errors == 0


def test_json_fields():
    order = {"customer": {"tier": "gold", "id": 7}, "total": 120.5, "tags": ["rush", "gift"], "ok": True}
    assert holds('json.customer.tier == "gold"', payload=order)
    assert holds("json.customer.id == 7", payload=order)
    assert holds("json.total > 100", payload=order)
    assert holds('json.tags contains "rush"', payload=order)
    assert holds('json.tags.1 == "gift"', payload=order)  # a digit indexes a list
    assert holds('json.customer contains "tier"', payload=order)  # an object contains its keys
    assert holds("json.ok", payload=order)  # a JSON true is a condition
    assert holds("json.ok == true", payload=order)
    assert not holds("json.ok == 1", payload=order)  # true is no number
    assert holds('json.customer.tier in ["gold", "platinum"]', payload=order)
    assert holds('json == "plain"', payload='"plain"')  # json alone is the whole document


def test_a_missing_field_or_a_body_that_is_not_json_is_null_and_comparisons_with_null_are_false():
    for payload in ({"other": 1}, "not json", b"\xff\xfe", {"customer": "flat"}, {"tags": ["a"]}):
        for condition in ("json.customer.id == 7", "json.customer.id != 7", "json.customer.id < 7",
                          "json.customer.id >= 7", 'json.customer.id contains "7"',
                          'json.customer.id matches "7"', "json.customer.id in [7, null]",
                          "json.customer.id", "json.tags.5 == 1"):
            assert not holds(condition, payload=payload), (condition, payload)
        assert holds("json.customer.id == null", payload=payload)
        assert holds("not json.customer.id == 7", payload=payload)  # not false
    assert holds("json.customer.id != null", payload={"customer": {"id": 7}})
    assert not holds("json.customer.id == null", payload={"customer": {"id": 7}})


def test_values_of_different_kinds_never_compare_equal_or_ordered():
    assert not holds('json.n == "5"', payload={"n": 5})
    assert holds('json.n != "5"', payload={"n": 5})
    assert not holds('json.n < "9"', payload={"n": 5})
    assert not holds("json.n > 1", payload={"n": [5]})


def test_only_true_is_a_condition_that_holds():
    assert not holds("json.n", payload={"n": 1})
    assert not holds('json.s', payload={"s": "true"})
    assert holds("not json.n", payload={"n": 1})


# ---------------------------------------------------------------------------- functions

def test_built_in_functions():
    assert sorted(DEFAULT_FUNCTIONS) == ["int", "len", "lower", "startswith", "upper"]
    assert holds('lower(body) == "urgent"', payload="URGENT")
    assert holds('upper(queue) == "ORDERS"', queue="orders")
    assert holds('startswith(queue, "ord")', queue="orders")
    assert not holds('startswith(queue, "x")', queue="orders")
    assert holds("len(json.tags) == 2", payload={"tags": [1, 2]})
    assert holds("len(body) == 5", payload="hello")
    assert holds("int(json.n) > 10", payload={"n": " 42 "})
    assert holds("int(json.n) == 3", payload={"n": 3.9})
    assert holds("int(body) == null", payload="abc")  # None if it cannot
    assert holds("int(json.n) == null", payload={"n": "NaN"})
    # they return null for a value they do not apply to: no error counted
    routes = Routes.parse('route "*" when len(json.missing) > 1 or lower(size) == "x" to "yes"')
    assert routes.route("q", b"{}") == "q" and routes.errors == 0


def test_an_embedders_function_is_called_with_the_evaluated_arguments():
    calls = []

    def priority(body: str, floor: int) -> int:
        calls.append((body, floor))
        return max(body.count("!"), floor)

    routes = Routes.parse('route "logs.*" when priority(body, 2) >= 3 to "logs-hot"', {"priority": priority})
    assert routes.route("logs.a", b"!!!") == "logs-hot"
    assert routes.route("logs.a", b"!") == "logs.a"
    assert routes.route("other", b"!!!") == "other"  # the pattern is checked first
    assert calls == [("!!!", 2), ("!", 2)]


def test_an_embedders_function_may_replace_a_built_in_and_take_expressions():
    assert holds("len(body) == 99", payload="x", len=lambda _: 99)
    assert holds("both(size > 0, true)", payload="x", both=lambda a, b: a and b)
    assert holds("zero() == 0", zero=lambda: 0)


def test_a_function_that_raises_makes_its_rule_not_match_and_is_counted():
    def fragile(body: str) -> int:
        return int(body)

    routes = Routes.parse('route "*" when fragile(body) > 5 to "big"\nroute "*" to "rest"', {"fragile": fragile})
    assert routes.route("q", b"9") == "big"
    assert routes.route("q", b"nine") == "rest"  # the message is not lost
    assert routes.errors == 1
    assert routes.last_error.startswith('line 1 (route "*" when fragile(body) > 5 to "big"): fragile() raised ValueError')
    # a wrong argument count is a runtime matter too: parsed, then counted
    routes = Routes.parse('route "*" when fragile(body, size) > 5 to "big"', {"fragile": fragile})
    assert routes.route("q", b"9") == "q"
    assert routes.errors == 1 and "TypeError" in routes.last_error


def test_function_names_the_rules_cannot_call_are_refused():
    with pytest.raises(ValueError, match="not a keyword"):
        Routes.parse("", {"size": len})
    with pytest.raises(ValueError, match="letters, digits"):
        Routes.parse("", {"my-func": len})
    with pytest.raises(TypeError, match="not callable"):
        Routes.parse("", {"f": 3})


# ---------------------------------------------------------------------------- errors

ERRORS = [
    # (rules, line, column, message start)
    ('route "orders.*', 1, 7, 'unterminated string'),
    ('route "a" to "b"\nroute "a" whem size > 1 to "b"', 2, 11, "expected when or to, found whem"),
    ('route "a" when sise > 1 to "b"', 1, 16, "unknown word sise"),
    ('route "a" when prio(body) > 1 to "b"', 1, 16, "unknown function prio (known: int, len, lower, startswith, upper)"),
    ('\n\nroute "a" when body matches "(x" to "b"', 3, 29, 'bad regular expression "(x"'),
    ('route "a" to "b" extra', 1, 18, "unexpected extra after the target"),
    ('route "a" to "b" route "c" to "d"', 1, 18, "unexpected route after the target"),
    ('route "a" when size > 1\nroute "b" to "c"', 1, 24, "expected to, found end of line"),
    ('route "a" when size > 1  # no target', 1, 26, "expected to, found end of line"),
    ('route "a" when size > 1; route "b" to "c"', 1, 24, "expected to, found ;"),
    ('route "a" when size > 1', 1, 24, "expected to, found end of text"),
    ('route "a" to "b c"', 1, 14, 'bad target queue name "b c"'),
    ('route "a" to ".."', 1, 14, 'bad target queue name ".."'),
    ('route "a" to "' + "x" * 201 + '"', 1, 14, "bad target queue name"),
    ('route "a.*" to "{2}.x"', 1, 16, "unknown placeholder {2} in target"),
    ('route "a" to "{name}"', 1, 14, "unknown placeholder {name} in target"),
    ('route "a.*" to "{1} x"', 1, 16, "bad target queue name"),
    ('route to "x"', 1, 7, "expected a queue pattern in double quotes, found to"),
    ('route "" to "x"', 1, 7, "empty pattern"),
    ('route "a" to orders', 1, 14, "expected a target queue in double quotes or drop, found orders"),
    ('  Route "a" to "b"', 1, 3, "expected route, found Route (keywords are lower case)"),
    ('route "a" When size > 1 to "b"', 1, 11, "expected when or to, found When (keywords are lower case)"),
    ('route "a" when size = 1 to "b"', 1, 21, "unexpected character '=': write == to compare"),
    ('route "a" when size > 1 && true to "b"', 1, 25, "unexpected character '&': write and"),
    ("route 'a' to \"b\"", 1, 7, "unexpected character \"'\": strings are in double quotes"),
    ('route "a" when size to "b"', 1, 16, "size is a number, not a condition"),
    ('route "a" when true and body to "b"', 1, 25, "body is a string, not a condition"),
    ('route "a" when not "x" to "b"', 1, 20, '"x" is a string, not a condition'),
    ('route "a" when size > "big" to "b"', 1, 16, 'size is a number and "big" is a string: > can never hold'),
    ('route "a" when queue == 3 to "b"', 1, 16, "queue is a string and 3 is a number"),
    ('route "a" when json.x > null to "b"', 1, 23, "> with null is never true"),
    ('route "a" when true < false to "b"', 1, 21, "< does not order true and false"),
    ('route "a" when 1 < size < 3 to "b"', 1, 25, "unexpected <: comparisons do not chain"),
    ('route "a" when (size > 1 to "b"', 1, 26, "expected ), found to"),
    ('route "a" when queue in "x" to "b"', 1, 25, 'expected a list [ ... ] after in, found "x"'),
    ('route "a" when queue in ["x" "y"] to "b"', 1, 30, 'expected , or ], found "y"'),
    ('route "a" when size contains "x" to "b"', 1, 16, "size is a number: contains looks into text"),
    ('route "a" when size matches "x" to "b"', 1, 16, "size is a number: matches needs text"),
    ('route "a" when body matches 3 to "b"', 1, 29, "expected a regular expression in double quotes after matches"),
    ('route "a" when len to "b"', 1, 16, "len is a function: call it as len(...)"),
    ('route "a" when len(body size) > 1 to "b"', 1, 25, "expected , or ), found size"),
    ('route "a" when size > 10kb to "b"', 1, 23, "bad number 10kb"),
    ('route "a" when body == "\\n" to "b"', 1, 25, "unknown escape \\n in a string"),
    ('route "a" when json. == 1 to "b"', 1, 20, "expected a field name after the dot"),
    ('route "a" when to "b"', 1, 16, "expected a value"),
    ('route "[z-a]" to "b"', 1, 7, 'bad pattern "[z-a]"'),
]


@pytest.mark.parametrize("rules, line, column, message", ERRORS, ids=[e[3][:40] for e in ERRORS])
def test_a_mistake_is_reported_at_its_line_and_column(rules, line, column, message):
    with pytest.raises(RuleError) as caught:
        Routes.parse(rules)
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert error.message.startswith(message), error.message
    assert str(error) == f"line {line}, column {column}: {error.message}"
    assert "\n" not in str(error)


def test_a_rule_error_is_a_value_error():
    with pytest.raises(ValueError, match=r"^line 1, column 16: unknown word sise"):
        Routes.parse('route "a" when sise > 1 to "b"')


def test_columns_count_characters_and_tabs_as_one():
    with pytest.raises(RuleError) as caught:
        Routes.parse('# café ünïcode\n\troute "é" whem to "b"')
    assert (caught.value.line, caught.value.column) == (2, 12)


def test_the_routing_module_is_pure():
    assert forbidden_chains(ROOT / "lab" / "backends" / "primer" / "core" / "routing.py") == []
