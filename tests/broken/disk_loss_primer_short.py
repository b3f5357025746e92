"""A deliberately broken design (``tests.broken``): Primer whose
put is acknowledged with one copy too few — each node is booted with ``replicas`` one less
than the cluster's option says (the off-by-one of ``peers[:w - 2]``), so a put stores the
message on W-1 nodes and answers. It promises what Primer with those options promises (a
message survives until all W of its replicas lose their copies), so losing the one disk
that held a message's only copy breaks that promise.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lab.backends.primer.driver import PrimerBackend

NAME = "primer-one-copy-short"


class OneCopyShortPrimer(PrimerBackend):
    name = NAME
    summary = "Primer acknowledging a put after W-1 copies (a test's deliberate bug)"

    def _config(self, node: str) -> Any:
        config = super()._config(node)
        return dataclasses.replace(config, replicas=max(1, config.replicas - 1))  # the bug


BACKEND = OneCopyShortPrimer
