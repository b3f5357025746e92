"""The templates `lab new design NAME` fills in: a small, working design package, as text
files (``*.tmpl``) laid out as the package they become. ``package/`` is renamed to the
design's name, ``{{name}}`` and ``{{Class}}`` in paths and text are replaced; the command is
``lab.cli.new``. Nothing here is imported by the lab: the files are read as text."""
