"""Whether a thread's unfinished work is in flight or lost, read from its lease (DESIGN.md invariant 9).

A ``running`` thread's record names the process holding it (:class:`~graphckpt.savers.base.Lease`): while that lease
is live (not expired, its owner not a dead process of this host) the head's calls that started and have not finished
are *in flight* (shown running, with their elapsed time); only once the owner is gone are they *lost*. The same lease
gives the owner, the seconds left on it, and for a ``crashed`` thread when it crashed (the lease's expiry, or its
last heartbeat when its owner is known dead).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NOBODY", "Liveness", "liveness", "pending_items"]


@dataclass(frozen=True, slots=True)
class Liveness:
    """What a thread's lease says about who runs it."""

    owner: str | None
    """``host pid N`` of the lease's owner (``None``: nobody holds the thread)."""
    live: bool
    """The lease is live: the owner runs the thread now."""
    lease_left: float | None = None
    """Seconds until a live lease expires unless renewed."""
    crashed_since: dt.datetime | None = None
    """When a dead or expired owner stopped (for a thread whose lease is not live)."""

    @property
    def lease_text(self) -> str | None:
        """``lease 12 s left`` for a live lease, else ``None``."""
        return None if self.lease_left is None else f"lease {self.lease_left:.0f} s left"


NOBODY = Liveness(owner=None, live=False)


def liveness(record: Any, now: float | None = None) -> Liveness:
    """The :class:`Liveness` of a thread record (a :class:`~graphckpt.savers.base.ThreadRecord`); a record without a
    lease (a done thread, a fresh fork nobody claimed) is :data:`NOBODY`."""
    lease = getattr(record, "lease", None)
    if lease is None or getattr(record, "status", None) not in ("running", "crashed"):
        return NOBODY
    now = time.time() if now is None else now
    who = f"{lease.owner.host} pid {lease.owner.pid}"
    if lease.live(now):
        return Liveness(owner=who, live=True, lease_left=max(0.0, lease.lease_until - now))
    since = lease.lease_until if now > lease.lease_until else lease.heartbeat_at
    return Liveness(owner=who, live=False, crashed_since=dt.datetime.fromtimestamp(since, dt.UTC))


def pending_items(record: Mapping[str, Any], in_flight: bool, now: float | None = None) -> list[dict[str, Any]]:
    """The head's uncommitted audit entries a thread page lists: failed attempts, and the calls that started and did
    not finish, as ``call in flight`` (with ``elapsed_s``) while ``in_flight`` (its owner runs it), else ``lost
    call``."""
    now = time.time() if now is None else now
    out: list[dict[str, Any]] = []
    for key in ("attempts", "calls"):
        items: Iterable[Any] = record.get(key, [])
        for item in items:
            if not isinstance(item, Mapping) or not item.get("pending"):
                continue
            if key == "attempts":
                out.append({"kind": "failed attempt", **item})
            elif item.get("status") == "lost" and in_flight:
                started = item.get("started_at")
                elapsed = max(0.0, now - float(started)) if isinstance(started, int | float) else None
                out.append({"kind": "call in flight", "elapsed_s": elapsed, **item})
            elif item.get("status") == "lost":
                out.append({"kind": "lost call", **item})
    return out
