"""The algorithm of `primary_backup`: no sockets, no files, no clock of its own — only the lab's
Runtime (``lab.design.runtime``), so the same code runs in the simulator and live. The lab's
purity check (``lab conform``) walks every import of this folder to keep it so."""

from primary_backup.core.queue import Full, Item, Node, NotPrimary, State

__all__ = ["Full", "Item", "Node", "NotPrimary", "State"]
