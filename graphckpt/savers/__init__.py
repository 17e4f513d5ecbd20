"""Checkpoint savers. ``MemorySaver`` is always available; ``SqliteSaver`` and ``PostgresSaver`` live in their own
modules (``graphckpt.savers.sqlite``, ``graphckpt.savers.postgres``) so their drivers are imported only when used."""

from graphckpt.savers.base import Saver
from graphckpt.savers.memory import MemorySaver

__all__ = ["MemorySaver", "Saver"]
