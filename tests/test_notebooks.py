"""Every notebook runs top to bottom with quick parameters (papermill, a real kernel).

Each notebook has its quick parameters here; those that run many designs in both worlds
are in the slow tier (CI runs it after the fast one).
"""

from __future__ import annotations

from pathlib import Path

import papermill
import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
# name -> (papermill parameters, slow?)
QUICK: dict[str, tuple[dict, bool]] = {
    "01-ideal-tour.ipynb": ({"scale": 0.2}, False),
    "02-compare-designs.ipynb": ({"scale": 0.2, "workloads": ["steady", "gc-pause"],
                                  "backends": ["ideal", "kestrel", "queuefka"]}, True),
    "03-net-splits.ipynb": ({"scenarios": ["split-one"], "seeds": 1}, True),
    "04-gc-pauses.ipynb": ({"scenarios": ["gc-long"], "seeds": 1}, True),
    "05-delayed-writes.ipynb": ({"scenarios": ["late-writes"], "seeds": 1}, True),
    "06-crashes.ipynb": ({"scenarios": ["crash-one"], "seeds": 1}, True),
    "07-live-vs-sim.ipynb": ({"designs": ["ideal", "kestrel"], "scale": 0.25, "fractions": [0.5],
                              "ramp_duration": 0.5}, True),
    "08-load-tests.ipynb": ({"designs": ["kestrel", "queuefka"], "users": 4, "duration": 3.0}, True),
    "09-real-brokers.ipynb": ({"brokers": ["redis", "beanstalkd"], "designs": ["kestrel"],
                               "workloads": ["steady", "crash"]}, True),
}


def test_every_notebook_has_quick_parameters():
    assert {p.name for p in NOTEBOOKS} == set(QUICK)


def _case(notebook: Path):
    parameters, slow = QUICK.get(notebook.name, ({}, False))
    return pytest.param(notebook, parameters, id=notebook.name, marks=[pytest.mark.slow] if slow else [])


@pytest.mark.parametrize("notebook,parameters", [_case(p) for p in NOTEBOOKS])
def test_notebook_runs(notebook, parameters, tmp_path):
    executed = tmp_path / notebook.name
    papermill.execute_notebook(str(notebook), str(executed), parameters=parameters, cwd=str(notebook.parent),
                               kernel_name="python3", progress_bar=False)
    text = executed.read_text()
    assert "image/png" in text  # every notebook draws
    assert "Traceback" not in text
