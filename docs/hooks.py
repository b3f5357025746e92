"""MkDocs hooks (mkdocs.yml: ``hooks: [docs/hooks.py]``): the site's generated pages.

The CLI reference and the fault kinds' reference are made from the code at build time
(``lab.cli.reference``), never written by hand, so they cannot drift from the parser or the
fault registry. This module only hands them to MkDocs.
"""

from __future__ import annotations

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

def on_files(files: Files, config: MkDocsConfig) -> Files:
    from lab.cli import reference

    for path, make in reference.PAGES.items():
        existing = files.get_file_from_path(path)
        if existing is not None:  # the copy in docs/reference/ never wins over the code
            files.remove(existing)
        files.append(File.generated(config, path, content=make()))
    this = files.get_file_from_path("hooks.py")
    if this is not None:  # this module sits in docs/ beside the pages; it is no page of the site
        files.remove(this)
    return files
