"""Primer's planted bugs (``lab/backends/primer/mutants.py``): each is caught by its first scenario at
seed 1 — the verdict invalid, its reason naming the broken promise — while the unmutated
design on the same run raises no alarm; and each buggy copy is still the real code it
replaces but for its mistake, so a change to Primer cannot leave a mutant testing old code."""

from __future__ import annotations

import ast
import difflib
import inspect
import textwrap

import pytest

from lab.backends.primer.core.queues import Queues
from lab.backends.primer.core.replica import Replica
from lab.experiments.planting import catalogue, plant
from lab.backends.primer import mutants as primer_mutants
from lab.experiments.runner import run
from lab.judge.findings import Verdict
from lab.workloads.spec import load_workload

LOST = ("acknowledged messages that no fault explains",
        "promises no loss of an acknowledged message but under a fault that could have hurt it")
TWICE = ("duplicate deliveries that no lease, release or fault explains",
         "promises at-least-once: a delivery comes again only after its lease of 5 s expires")
#: what each mutant's catching run must say (the anomaly, the promise it breaks); the
#: unmutated run may not show that anomaly
CAUGHT = {
    "primer-one-copy-short": LOST,
    "primer-ack-before-fsync": LOST,
    "primer-claims-its-own-copy": TWICE,
    "primer-get-keeps-a-copy": (TWICE[0], "at-most-once consumers promises at-most-once"),
}


def test_primer_has_the_mutants_this_file_checks():
    assert {name for name, m in catalogue(["primer"]).items()} == set(CAUGHT)


#: steady (the one at-most-once workload) runs 5,000 messages: the pair takes tens of seconds
SLOW = {"primer-get-keeps-a-copy"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name
                                  for name in sorted(CAUGHT)])
def test_the_first_scenario_at_seed_1_catches_the_mutant_and_not_the_design(tmp_path, name):
    with plant(name) as m:
        workload, options = load_workload(m.scenarios[0]), dict(m.options)
        broken = run(workload, "primer", "sim", seed=1, out=tmp_path / "mutant", progress=False, options=options)
    v = broken.check
    anomaly, promise = CAUGHT[name]
    assert v.verdict == Verdict.INVALID and anomaly in v.reason and promise in v.reason, v.line()
    control = run(workload, "primer", "sim", seed=1, out=tmp_path / "control", progress=False, options=options)
    c = control.check
    assert c.verdict != Verdict.INVALID and c.counts.lost == 0 and anomaly not in c.reason, c.line()


def _statements(function) -> list[str]:
    """The function's body as code lines, without its docstring and comments."""
    [node] = ast.parse(textwrap.dedent(inspect.getsource(function))).body
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
        else node.body
    return "\n".join(ast.unparse(statement) for statement in body).splitlines()


@pytest.mark.parametrize("original, copy, mistake", [
    (Queues._put, primer_mutants._put_one_copy_short,
     (["-copy = Copy(queue, message_id, self.name, seq, self.rt.now_ns(), (self.name, *peers[:w - 1]), payload)"],
      ["+copy = Copy(queue, message_id, self.name, seq, self.rt.now_ns(), (self.name, *peers[:max(0, w - 2)]), "
       "payload)"])),
    (Queues._try_get, primer_mutants._try_get_claiming_locally,
     (["-    for replica in added.replicas:"],
      ["+    mine_first = sorted(added.replicas, key=lambda r: r != self.name)", "+    for replica in mine_first:"])),
    (Replica.settle, primer_mutants._settle_in_background,
     (["-        await pending"],
      ["+        self.rt.spawn(_finish(pending), name=f'{self.name} aof fsync {queue}')"])),
])
def test_each_buggy_copy_differs_from_the_real_code_by_its_mistake_only(original, copy, mistake):
    """A mutant that copies a method must follow it: when this fails, Primer's code changed
    under the mutant — copy the new method again and plant the same mistake in it."""
    diff = [line for line in difflib.unified_diff(_statements(original), _statements(copy), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    removed, added = mistake
    assert diff == removed + added, diff
