"""Generated mutants (``lab mutants --generate``, ``lab.experiments.generated``): a design's
sites are listed the same way every time, at the right lines, and only inside function
bodies; the lab's three operators make the change they name; a site planted changes the real
function everywhere it is referenced (a method with a zero-argument ``super()``, a function
imported by name elsewhere) and un-planting restores it; a name re-creates its mutant in a
fresh process; a tiny hunt reports killed, differing and likely-equivalent mutants as their
runs' history digests say."""

from __future__ import annotations

import ast
import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cosmic_ray.mutating import mutate_code

from lab.cli import main
from lab.experiments.generated import apply, compare, operators, sites
from lab.experiments.generated.plan import Generate, LiveRefused, NotMutable, plan
from lab.experiments.hunt import hunt
from lab.experiments.planting import ENV, UnknownMutant, mutant, plant
from lab.experiments.swarm_worker import SeedRun

EQUIVALENT = "ideal~gen~core~NumberReplacer~0"  # xids counted from 2, not 1: no history shows an xid
LOSES_PUTS = "ideal~gen~core~RemoveStatement~2"  # a put with no reader waiting is dropped
WIDER_INT = "kestrel~gen~wire.protocol~NumberReplacer~16"  # java_int's lower bound -(2**31) -> -(3**31)
SWAPPED_SUPER = "cassieq~gen~core.accounts~SwapArguments~0"  # super().__init__(operation, message), swapped


def _function_bodies(path: str) -> list[tuple[int, int]]:
    """The line spans of every def's body in the file, by the standard library's parser."""
    spans = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno))
    return spans


def test_sites_are_listed_alike_each_time_inside_function_bodies_at_their_lines():
    first = sites.sites("kestrel")
    sites._operator_sites.cache_clear()  # listed again from the files, not from the cache
    sites._nodes.cache_clear()
    assert sites.sites("kestrel") == first and len(first) > 1000
    assert len({s.name for s in first}) == len(first)
    modules = sites.design_modules("kestrel")
    assert set(modules) >= {"core.queue", "core.journal", "wire.memcache"} and "mutants" not in modules
    for site in first[::37]:
        line = Path(site.path).read_text().splitlines()[site.line - 1]
        assert any(a <= site.line <= b for a, b in _function_bodies(site.path)), site
        if site.operator == "NumberReplacer":
            assert any(c.isdigit() for c in line), (site, line)
        if site.operator == "ZeroIterationForLoop":
            assert "for " in line, (site, line)
    protocol = [s for s in first if s.module == "wire.protocol" and s.operator == "NumberReplacer"]
    # the module-level constants (BINARY_HEADER's struct, RELATIVE_EXPTIME_LIMIT...) are no sites
    assert all(any(a <= s.line <= b for a, b in _function_bodies(s.path)) for s in protocol)
    made = sites.mutation(sites.find(WIDER_INT))
    assert made.site.line == 54 and made.change == "if not -(2**31) <= value < 2**31: -> if not -( 3**31) <= value < 2**31:"


def test_a_sample_is_a_function_of_its_seed_spread_over_the_modules():
    a, b = sites.sample("kestrel", 12, 1), sites.sample("kestrel", 12, 1)
    assert a == b and len(a) == 12 and a != sites.sample("kestrel", 12, 2)
    modules = {s.module for s in sites.sites("kestrel")}  # its modules with code in a function (10)
    assert {s.module for s in a} == modules  # each of them drawn once before any is drawn twice
    assert len({operators.family(s.operator) for s in a}) >= 6
    assert len(sites.sample("ideal", 1000, 1)) == len(sites.sites("ideal"))  # a small design: all of it


@pytest.mark.parametrize("name, code, index, expected", [
    ("DropAwait", "async def f():\n    await g(1)\n    x = await h()\n", 0, "async def f():\n    g(1)\n    x = await h()\n"),
    ("DropAwait", "async def f():\n    await g(1)\n    x = await h()\n", 1, "async def f():\n    await g(1)\n    x = h()\n"),
    ("RemoveStatement", "def f():\n    x = g(1)\n    self.log.write(x)\n    return g(2)\n", 0,
     "def f():\n    x = g(1)\n    pass\n    return g(2)\n"),
    ("SwapArguments", "f(a, b, k=1)\n", 0, "f(b, a, k=1)\n"),
    ("SwapArguments", "f(a,\n  b(c), d)\n", 1, "f(a,\n  d, b(c))\n"),
])
def test_the_labs_own_operators_make_the_change_they_name(name, code, index, expected):
    assert mutate_code(code, operators.operator(name), index) == expected


@pytest.mark.parametrize("name, code", [
    ("DropAwait", "async def f():\n    return g()\n"),
    ("RemoveStatement", "def f():\n    x = g()\n    'a docstring'\n    return g()\n"),
    ("SwapArguments", "f(a, a)\nf(*a, b)\nf(a, k=b)\nf(x for x in y)\nclass C(A, B): pass\n"),
])
def test_the_labs_own_operators_leave_alone_what_they_do_not_name(name, code):
    assert mutate_code(code, operators.operator(name), 0) is None


def test_the_operator_set_is_cosmic_rays_with_arguments_left_out_and_the_labs_three():
    names = operators.names()
    assert {"Binary_Add_Sub", "Compare_Lt_LtE", "NumberReplacer", "ExceptionReplacer", "ZeroIterationForLoop",
            "DropAwait", "RemoveStatement", "SwapArguments"} <= set(names)
    assert not {"VariableReplacer", "VariableInserter"} & set(names)
    assert all(sites.SEP not in n and n.replace("_", "").isalnum() for n in names)  # shell- and name-safe


def test_a_planted_site_changes_the_real_function_where_it_was_imported_by_name_and_is_undone():
    from lab.backends.kestrel.wire import protocol, text

    code = protocol.java_int.__code__
    with pytest.raises(ValueError, match="out of range"):
        text.java_int("-3000000000")
    with plant(WIDER_INT) as m:
        assert text.java_int("-3000000000") == -3000000000  # text.py's own `from ... import java_int`
        assert protocol.java_int("2147483647") == 2147483647 and m.options == {"syncJournal": "always"}
        with pytest.raises(ValueError, match="out of range"):
            protocol.java_int("2147483648")  # the upper bound is another site
        assert os.environ[ENV] == WIDER_INT
    assert protocol.java_int.__code__ is code and ENV not in os.environ
    with pytest.raises(ValueError, match="out of range"):
        text.java_int("-3000000000")


def test_a_method_with_a_zero_argument_super_is_planted_in_its_class_and_undone():
    from lab.backends.cassieq.core.accounts import AccountNotFound

    assert AccountNotFound("acc", "Op").to_json()["operation"] == "Op"
    with plant(SWAPPED_SUPER):
        assert AccountNotFound("acc", "Op").to_json()["operation"] == "The requested account 'acc' was not found."
    assert AccountNotFound("acc", "Op").to_json()["operation"] == "Op"


def test_a_change_that_drops_a_free_variable_cannot_be_planted_and_says_so():
    site = sites.find("kestrel~gen~core.journal_records~RemoveStatement~0")  # Truncated's super().__init__(...) -> pass
    with pytest.raises(apply.CannotPlant, match="free variables"):
        apply.build(site)
    with pytest.raises(UnknownMutant, match="free variables"):
        mutant(site.name)


@pytest.mark.parametrize("name, message", [
    ("kestrel~gen~core.queue", "is not a generated mutant's name"),
    ("kestrel~gen~core.nowhere~NumberReplacer~0", "no mutable module 'core.nowhere'"),
    ("kestrel~gen~core.queue~NoSuchOperator~0", "no operator 'NoSuchOperator'"),
    ("kestrel~gen~core.queue~NumberReplacer~100000", "has no position 100000 inside a function body"),
    ("nosuchdesign~gen~core~NumberReplacer~0", "nosuchdesign"),
])
def test_a_bad_generated_name_is_a_clear_unknown_mutant(name, message):
    with pytest.raises(UnknownMutant, match=message):
        mutant(name)


def test_a_name_recreates_its_mutant_in_a_fresh_process_through_the_hook():
    probe = ("from lab.experiments.planting import plant_from_environment as p; "
             "from lab.backends.ideal.core import IdealQueue as Q; "
             "before = Q.__init__.__code__; print(p('kestrel'), Q.__init__.__code__ is before, p('ideal'), "
             "Q.__init__.__code__ is before, Q.__init__.__code__.co_consts)")
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, ENV: EQUIVALENT}, capture_output=True,
                          text=True, timeout=60)
    words = done.stdout.split(maxsplit=4)
    assert words[:4] == ["None", "True", EQUIVALENT, "False"], done.stderr
    assert "2" in words[4] and f"lab: mutant {EQUIVALENT} planted" in done.stderr


def test_a_tiny_hunt_reports_each_mutant_as_its_runs_digests_say(tmp_path):
    result = hunt(designs=["ideal"], seeds=2, jobs=1, out=tmp_path / "h", progress=False, echo=lambda *a: None,
                  generate=Generate(names=(EQUIVALENT, LOSES_PUTS)))
    by_name = {h.mutant.name: h for h in result.hunts}
    killed, same = by_name[LOSES_PUTS], by_name[EQUIVALENT]
    assert killed.caught is not None and len(killed.runs) == 1  # caught by the base load: nothing to shrink
    assert same.caught is None and len(same.runs) == 3  # the base load, then swarm seeds 1 and 2
    for h in result.hunts:
        controls = [result.controls[k] for k in result.control_keys[h.mutant.name]]
        assert len(controls) == len(h.runs) and all(c.digest and len(c.digest) == 16 for c in controls)
        differed = [run.digest != control.digest for (_, run), control in zip(h.runs, controls)]
        assert differed == ([True] if h is killed else [False, False, False]), h.mutant.name
    with open(result.directory / "generated.csv") as f:
        status = {row["mutant"]: row["status"] for row in csv.DictReader(f)}
    assert status == {EQUIVALENT: compare.EQUIVALENT, LOSES_PUTS: compare.KILLED}
    text = (result.directory / "generated.md").read_text()
    assert "ideal: generated 2, plantable 2, differing 1, killed 1, kill rate among differing 100%" in text
    assert "likely equivalent (no history differed): lab/backends/ideal/core.py:57 NumberReplacer" in text


def test_a_run_differs_from_its_control_by_its_digest_or_by_raising():
    def run(verdict: str = "valid", digest: str = "ab") -> SeedRun:
        return SeedRun(1, "", verdict, "", digest=digest)

    assert compare.differs(run(), run()) is False
    assert compare.differs(run(digest="cd"), run()) is True
    assert compare.differs(run("error", ""), run()) is True
    assert compare.differs(run("error", ""), run("error", "")) is None
    assert compare.differs(run(digest=""), run(digest="")) is None  # a live run: nothing to compare
    assert compare.differs(run(), None) is None
    assert compare.judge([(run(), run()), (run(), None)], killed=False).status == compare.UNKNOWN


def test_generate_is_refused_in_the_live_world_in_one_line(tmp_path, capsys):
    with pytest.raises(LiveRefused):
        plan(Generate(sample=1), ["ideal"], world="live")
    assert main(["mutants", "--generate", "--world", "live", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sim world only" in err and not (tmp_path / "x").exists()


def test_the_list_prints_each_sampled_site_its_change_and_runs_nothing(tmp_path, capsys):
    assert main(["mutants", "--generate", "--backends", "kestrel", "--sample", "5", "--list"]) == 0
    out = capsys.readouterr().out
    drawn = sites.sample("kestrel", 5, 1)
    for site in drawn:
        assert site.name in out and f"{site.where} {site.operator}: " in out
    assert " -> " in out and "(kestrel syncJournal=always)" in out


def test_a_spent_budget_starts_no_mutant_run_and_says_so(tmp_path):
    result = hunt(designs=["ideal"], seeds=2, jobs=1, out=tmp_path / "h", progress=False, echo=lambda *a: None,
                  generate=Generate(names=(EQUIVALENT,)), budget=0)
    (h,) = result.hunts
    assert h.out_of_budget and h.runs == [] and not result.controls
    with open(result.directory / "generated.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert row["status"] == f"{compare.UNKNOWN} (out of budget)" and row["runs"] == "0"


def test_a_cached_function_answers_as_the_mutant_while_planted_and_as_itself_after():
    from lab.backends.kestrel.wire import connection

    assert connection._get_kind("q/open/close") == "get/open/close"  # now in its lru_cache
    with plant("kestrel~gen~wire.connection~NumberReplacer~2"):  # key.split("/")[1:] -> [2:]
        assert connection._get_kind("q/open/close") == "get/close"
    assert connection._get_kind("q/open/close") == "get/open/close"


def test_a_real_broker_is_refused_and_a_dicts_unpacking_is_no_power_operator():
    with pytest.raises(NotMutable, match="real broker"):
        plan(Generate(sample=1), ["redis"])
    openapi = [s for s in sites.sites("cassieq") if s.module == "wire.openapi" and s.operator.startswith("Binary_Pow")]
    assert all("**(" not in Path(s.path).read_text().splitlines()[s.line - 1] for s in openapi)


def test_the_screen_stops_a_mutant_whose_runs_all_match_their_controls_and_never_a_differing_one(tmp_path):
    result = hunt(designs=["ideal"], seeds=8, jobs=1, out=tmp_path / "h", progress=False, echo=lambda *a: None,
                  generate=Generate(names=(EQUIVALENT, LOSES_PUTS), screen=3))
    by_name = {h.mutant.name: h for h in result.hunts}
    same, killed = by_name[EQUIVALENT], by_name[LOSES_PUTS]
    # the screen counts the runs whose controls are done: 3 of them, so a run or two more, never all 9
    assert 3 <= len(same.runs) < 9 and same.caught is None and not same.out_of_budget
    assert killed.caught is not None
    assert compare.screened([(SeedRun(1, "", "valid", "", digest="ab"), SeedRun(1, "", "valid", "", digest="ab"))] * 3,
                            3)
    assert not compare.screened([(SeedRun(1, "", "valid", "", digest="ab"), None)] * 3, 3)  # controls still run
    assert not compare.screened([(SeedRun(1, "", "valid", "", digest="ab"), SeedRun(1, "", "valid", "", digest="cd"))]
                                + [(SeedRun(1, "", "valid", "", digest="ab"), SeedRun(1, "", "valid", "", digest="ab"))] * 3, 3)
    text = (result.directory / "generated.md").read_text()
    assert "screened after 3 matching runs" in text and "likely equivalent (no history differed)" in text


def test_the_sims_cpu_model_hook_is_no_site():
    where = {(s.module, s.line) for s in sites.sites("kestrel")}
    source = Path("lab/backends/kestrel/wire/connection.py").read_text().splitlines()
    start = next(i for i, line in enumerate(source, 1) if "def request_kind" in line)
    assert not any(module == "wire.connection" and start <= line <= start + 6 for module, line in where)
    assert any(module == "wire.connection" for module, _ in where)  # the rest of the module is


def test_a_mutant_that_makes_the_design_do_nothing_without_faults_is_caught_by_the_base_load(tmp_path):
    # the reply reader's first test negated: no reply is ever read, so no put is acknowledged
    name = "kestrel~gen~wire.client~AddNot~5"
    result = hunt(designs=["kestrel"], seeds=2, jobs=1, out=tmp_path / "h", progress=False, echo=lambda *a: None,
                  generate=Generate(names=(name,)))
    (h,) = result.hunts
    assert h.caught is not None and h.caught[0].label == "base seed 1" and h.caught[1].verdict == "no evidence"
    (control,) = result.control_runs(name)
    assert control.verdict == "valid"  # the design does deliver there


def test_no_evidence_under_faults_is_no_catch():
    from lab.experiments.hunt import Trial, _caught

    quiet, faulted = Trial("base", {"faults": []}, 1), Trial("swarm", {"faults": [{"fault": "crash"}]}, 1)
    nothing = SeedRun(1, "", "no evidence", "nothing was delivered")
    assert _caught(quiet, nothing) and not _caught(faulted, nothing)
    assert _caught(faulted, SeedRun(1, "", "invalid", "lost")) and not _caught(quiet, SeedRun(1, "", "valid", ""))


def test_a_run_that_raised_where_its_control_did_not_kills_the_mutant():
    def run(verdict: str, digest: str = "ab") -> SeedRun:
        return SeedRun(1, "", verdict, "", digest=digest)

    assert compare.judge([(run("valid"), run("valid")), (run("error", ""), run("valid"))], killed=False).status == \
        compare.KILLED
    assert compare.judge([(run("error", ""), run("error", ""))], killed=False).status == compare.UNKNOWN  # both raised
    assert compare.judge([(run("error", ""), None)], killed=False).status == compare.UNKNOWN  # no control yet
