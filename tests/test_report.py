"""`lab report`: runs as one self-contained HTML file (tables and charts inline), that a
browser opens with no server and no network; bad paths are refused in one line."""

from __future__ import annotations

import re

import pytest

from selenium.webdriver.common.by import By

from lab.cli import main
from lab.experiments.runner import run
from lab.workloads.spec import parse_workload
from tests.test_lab_load_web import browser  # noqa: F401  (headless Chromium, as `lab load --web` drives it)

DESIGNS = ("ideal", "kestrel")
TINY = {"name": "tiny", "producers": 1, "consumers": 1, "rate": 500, "duration": 0.3, "seed": 1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A folder of two small sim runs, as `lab compare` lays them out."""
    folder = tmp_path_factory.mktemp("runs")
    workload = parse_workload(TINY)
    for design in DESIGNS:
        run(workload, design, "sim", out=folder / f"tiny-{design}-sim", progress=False)
    return folder


@pytest.fixture(scope="module")
def report(runs, tmp_path_factory):
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert main(["report", *(str(runs / f"tiny-{d}-sim") for d in DESIGNS), "--out", str(out)]) == 0
    return out


def test_the_report_is_self_contained_and_names_every_design(report):
    page = report.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)  # nothing fetched
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page.lower()
    for design in DESIGNS:
        assert design in page
    assert re.search(r'<img src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', page)
    assert "nothing lost" in page  # the verdict's reason
    assert page.count("<tr>") == 1 + len(DESIGNS)  # a header and a row per run


def test_a_folder_of_runs_is_every_run_in_it(runs, tmp_path):
    out = tmp_path / "all.html"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.count("<tr>") == 1 + len(DESIGNS)
    assert all(design in page for design in DESIGNS)


def test_the_default_out_is_under_results_runs(runs, results):
    assert main(["report", str(runs / "tiny-ideal-sim")]) == 0
    written = list((results / "runs").glob("report-*.html"))
    assert len(written) == 1


@pytest.mark.parametrize("bad", ["missing", "empty", "file"])
def test_a_path_that_holds_no_run_is_refused_in_one_line(bad, runs, tmp_path, capsys):
    path = tmp_path / bad
    if bad == "empty":
        path.mkdir()
    elif bad == "file":
        path.write_text("not a run\n")
    out = tmp_path / "report.html"
    assert main(["report", str(runs / "tiny-ideal-sim"), str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lab: error: ") and "\n" not in err and str(path) in err
    assert not out.exists()  # nothing written


def test_a_folder_as_out_is_refused(runs, tmp_path, capsys):
    assert main(["report", str(runs), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lab: error: --out") and "\n" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_report_opens_in_a_browser_without_errors(report, tmp_path, browser):  # noqa: F811
    browser.get(report.as_uri())  # a file: no server
    page = browser.find_element(By.TAG_NAME, "body").text
    for design in DESIGNS:
        assert design in page
    images = browser.find_elements(By.TAG_NAME, "img")
    assert images and all(browser.execute_script("return arguments[0].naturalWidth", img) > 0 for img in images)
    browser.save_screenshot(str(tmp_path / "report.png"))
    assert (tmp_path / "report.png").stat().st_size > 0
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
