"""Lease owners on this host (DESIGN.md invariant 9, "a dead owner is no owner"): who this process is, and whether
the process a lease names is still alive.

A lease names its owner's host and pid, plus an *identity* that tells a reused pid apart: on Linux
``<boot>:<pidns>:<start>`` (the first 8 hex digits of ``/proc/sys/kernel/random/boot_id``, the inode of the pid
namespace, and the process's start time in clock ticks since boot, field 22 of ``/proc/<pid>/stat``). A lease is
*local* when its host is this host and its identity was taken on this boot in this pid namespace (a container with
its own pid namespace, or another machine with the same host name, is not local). A local owner is *dead* when its
pid does not exist or now belongs to a process that started at another time. Without ``/proc`` the identity is
empty: a lease with no identity is local when both sides have none and the host names match, and dead when its pid
does not exist (``kill(pid, 0)``). Anything else is judged by its lease's expiry only.

``$GRAPHCKPT_HOST`` overrides the host name a process writes into its leases (tests simulate another host with it).
"""

from __future__ import annotations

import functools
import os
import socket

__all__ = ["HOST_ENV", "host", "identity", "local_dead"]

HOST_ENV = "GRAPHCKPT_HOST"
"""The environment variable that names this process's host in its leases (default: the machine's host name)."""


def host() -> str:
    """This process's host name as its leases record it."""
    return os.environ.get(HOST_ENV) or socket.gethostname()


@functools.cache
def _machine() -> str:
    """``<boot>:<pidns>`` of this boot and pid namespace, or ``""`` without ``/proc``."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip().replace("-", "")[:8]
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    digits = "".join(c for c in pidns if c.isdigit())
    return f"{boot}:{digits}" if boot and digits else ""


def _started(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot), ``None`` when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()  # the command name may hold spaces and parentheses
    try:
        return int(fields[19])  # field 22 of the line; these start at field 3
    except (IndexError, ValueError):
        return None


def identity(pid: int | None = None) -> str:
    """The identity of process ``pid`` (default: this one) as a lease records it; ``""`` without ``/proc``."""
    machine = _machine()
    if not machine:
        return ""
    started = _started(os.getpid() if pid is None else pid)
    return "" if started is None else f"{machine}:{started}"


def local_dead(owner_host: str, pid: int, owner_identity: str) -> bool:
    """Whether the lease owner ``pid`` on ``owner_host`` with ``owner_identity`` is a process of this host that is
    gone (never ``True`` for another host, another boot or pid namespace, or a lease too old to say)."""
    if owner_host != host() or pid <= 0:
        return False
    machine = _machine()
    if owner_identity:
        mine, _, started = owner_identity.rpartition(":")
        if not machine or mine != machine:
            return False
        now = _started(pid)
        return now is None or str(now) != started
    if machine:  # a lease written without an identity (an older version): its expiry decides
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's): alive
        return False
    return False
