"""The documentation: the MkDocs site builds strictly, and the README stays short with links that resolve."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = ROOT / ".venv" / "bin" / "mkdocs"
README = ROOT / "README.md"

#: Markdown links and images: ``[text](target)`` and ``![alt](target)``.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def test_site_builds_strictly_without_warnings(tmp_path: Path) -> None:
    # --strict turns a broken link, a missing anchor or a page left out of the nav into a failure;
    # the WARNING check catches what strict mode only reports (and keeps the output's reason).
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([str(MKDOCS), "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert not [line for line in output.splitlines() if "WARNING" in line], output
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()


def test_readme_fits_in_250_lines() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_readme_relative_links_and_images_exist() -> None:
    targets = [t for t in LINK.findall(README.read_text()) if not re.match(r"[a-z]+:", t)]
    assert targets, "the README links into the docs"
    missing = [t for t in targets if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
    assert "docs/compare-designs.png" in targets and "docs/matrix-heatmap.png" in targets
