"""The exit statuses a ``graphckpt`` command ends with beyond 0 (done), 1 (failed) and 2 (usage)."""

from __future__ import annotations

__all__ = ["WAITING"]

WAITING = 3
"""The exit status of ``resume`` when the thread stops interrupted (waiting for an answer or a resume), so a script
can tell waiting (3) from done (0) and failed (1)."""
