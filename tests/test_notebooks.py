"""Every notebook runs top to bottom with quick parameters (papermill, a real kernel)."""

from __future__ import annotations

from pathlib import Path

import papermill
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
QUICK = {"scale": 0.2}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(notebook, tmp_path):
    executed = tmp_path / notebook.name
    papermill.execute_notebook(str(notebook), str(executed), parameters=QUICK, cwd=str(notebook.parent),
                               kernel_name="python3", progress_bar=False)
    text = executed.read_text()
    assert "VALID" in text and "image/png" in text
