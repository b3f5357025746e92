"""One module per design: ``make_client(targets, options, reliable, user) -> LoadClient``."""
