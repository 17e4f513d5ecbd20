"""The checks and errors every saver shares, so all backends refuse, match and report alike.

What no backend can store (:func:`check_storable`, :func:`utf8_safe`, ids past :data:`MAX_ID_BYTES`), what a
metadata filter may hold and how it matches (:func:`check_filter`, :func:`metadata_matches`, :func:`nul_free` for SQL
backends), how a message quotes an id (:func:`brief`), and the lease vocabulary of the specification
(:mod:`graphckpt.savers.base`): the status reads report (:func:`thread_status`), a lease from its columns, and the
errors of a busy thread, a lost claim and a lost lease.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from graphckpt.errors import (
    InvalidArgumentError,
    LeaseLostError,
    SerializationError,
    ThreadBusyError,
    ThreadConflictError,
)
from graphckpt.savers._rows import Lease, Owner, Status, StoredCheckpoint, ThreadRecord

__all__ = [
    "BRIEF_MAX",
    "MAX_ID_BYTES",
    "brief",
    "check_filter",
    "check_id",
    "check_storable",
    "claim_lost",
    "json_equal",
    "lease_from_columns",
    "lease_lost",
    "metadata_matches",
    "nul_free",
    "thread_busy",
    "thread_status",
    "utf8_safe",
]

BRIEF_MAX = 80
"""How many characters of an id or name an error message quotes (see :func:`brief`)."""


def brief(text: str) -> str:
    """``text`` as error messages quote it: its first :data:`BRIEF_MAX` characters, then ``…`` when it is longer.
    An id may be a megabyte long; a message stays one readable line."""
    return text if len(text) <= BRIEF_MAX else text[:BRIEF_MAX] + "…"


MAX_ID_BYTES = 1024
"""The longest id (thread, checkpoint, run, task) a saver stores, in bytes of UTF-8. Every saver refuses a longer one
with :class:`~graphckpt.errors.InvalidArgumentError` before its database sees it (PostgreSQL's btree indexes fail
on keys past about 2,700 bytes, with a message quoting the index)."""

_ID_NAMES = frozenset({"thread_id", "checkpoint_id", "run_id", "task_id", "parent_thread_id", "parent_checkpoint_id"})


def check_id(what: str, text: str | None) -> None:
    """Refuse an id ``text`` longer than :data:`MAX_ID_BYTES` bytes of UTF-8, naming it as ``what``."""
    if text is None or len(text) <= MAX_ID_BYTES // 4:  # 4 bytes a character at most: no encoding needed
        return
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ID_BYTES:
        raise InvalidArgumentError(
            f"{what} {brief(text)!r} is {size:,} bytes long (UTF-8); an id is at most {MAX_ID_BYTES:,} bytes"
        )


def check_storable(checkpoint: StoredCheckpoint | None = None, /, **texts: str | None) -> None:
    """Refuse, before anything is written, what no backend can store: text with a lone surrogate (``"\\ud800"``,
    which has no UTF-8 form), and NaN or an infinity in metadata (JSON has neither). Checks ``checkpoint``'s ids,
    metadata and blobs' names, and each of ``texts`` (named by its keyword in the message); raises
    :class:`~graphckpt.errors.SerializationError`. Every saver calls it in its writes, so all refuse the same
    values (a driver would fail with its own traceback, or store what it cannot read back)."""
    for what, text in texts.items():
        _check_text(what, text)
        if what in _ID_NAMES:
            check_id(what, text)
    if checkpoint is None:
        return
    cp = checkpoint
    for what, text in (
        ("thread_id", cp.thread_id),
        ("checkpoint_id", cp.checkpoint_id),
        ("parent_thread_id", cp.parent_thread_id),
        ("parent_checkpoint_id", cp.parent_checkpoint_id),
    ):
        _check_text(what, text)
        check_id(what, text)
    for b in cp.blobs:
        if not (b.channel.isascii() and b.thread_id.isascii()):
            _check_text(f"channel of a blob at step {b.step}", b.channel)
            _check_text("thread_id of a blob", b.thread_id)
    problem = _metadata_problem(cp.metadata)
    if problem is not None:
        where = f"metadata of checkpoint {brief(cp.checkpoint_id)!r} in thread {brief(cp.thread_id)!r}"
        raise SerializationError(f"{where} holds {problem}")


def _check_text(what: str, text: str | None) -> None:
    if text is None or text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(
            f"{what} {brief(text)!r} holds a lone surrogate (text with no UTF-8 form); it cannot be stored"
        ) from None


def _metadata_problem(value: Any, depth: int = 0) -> str | None:
    """What in metadata ``value`` no backend can store, or ``None``: a walk over its dicts and lists, cheap enough
    for every commit (ASCII text, the usual case, needs no encoding)."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return "a lone surrogate (text with no UTF-8 form); it cannot be stored"
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else "NaN or an infinity, which JSON cannot store"
    if depth > 200:
        return None  # deeper than any metadata the engine writes: the saver's own encoder judges it
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = _metadata_problem(key, depth + 1) or _metadata_problem(item, depth + 1)
            if problem is not None:
                return problem
    elif isinstance(value, list | tuple):
        for item in value:
            problem = _metadata_problem(item, depth + 1)
            if problem is not None:
                return problem
    return None


def utf8_safe(text: str | None) -> str | None:
    """``text`` with each lone surrogate written as its escape (``\\ud800``): for a failed thread's ``error``, a
    description that must be stored whatever the exception said."""
    if text is None:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


FILTER_DEPTH = 100
"""How deep a metadata filter value may nest (objects and arrays); a deeper one is refused."""


def check_filter(filter: Mapping[str, Any]) -> None:
    """Refuse a metadata filter that is not a JSON object, before any SQL: keys must be text (``{1: 1}`` is not
    JSON), values JSON values only: ``None``, booleans, integers, finite floats, text, lists (or tuples) and
    mappings with text keys, nested at most :data:`FILTER_DEPTH` deep; no text with a lone surrogate. A ``datetime``,
    a ``set``, bytes or NaN raise :class:`~graphckpt.errors.InvalidArgumentError` naming the filter key, so every
    saver refuses the same filters (a driver would quote its SQL, or a JSON encoder would turn the value into
    something that compares differently)."""
    if not isinstance(filter, Mapping):
        raise InvalidArgumentError(f"a metadata filter is a mapping of text keys to JSON values, not {_kind(filter)}")
    for key, value in filter.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(
                f"metadata filter key {_quote(key)}: keys are text (top-level metadata names), not {_kind(key)}"
            )
        problem = _text_problem(key) or _json_problem(value, 0)
        if problem is not None:
            raise InvalidArgumentError(f"metadata filter key {brief(_quote(key))}: {problem}")


def _quote(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else repr(value.encode("utf-8", "backslashreplace").decode())


def _kind(value: Any) -> str:
    name = f"{type(value).__module__}.{type(value).__qualname__}".removeprefix("builtins.")
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _text_problem(text: str) -> str | None:
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "text holds a lone surrogate (no UTF-8 form, so no stored metadata holds it)"
    return None


def _json_problem(value: Any, depth: int) -> str | None:
    """What makes ``value`` no JSON value, or ``None``."""
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, str):
        return _text_problem(value)
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{value!r} is not a JSON number (stored metadata never holds it)"
    if depth >= FILTER_DEPTH:
        return f"the value nests deeper than {FILTER_DEPTH} levels"
    if isinstance(value, list | tuple):
        for item in value:
            problem = _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    if isinstance(value, Mapping):
        for k, item in value.items():
            if not isinstance(k, str):
                return f"an object key {_quote(k)} is {_kind(k)}; JSON keys are text"
            problem = _text_problem(k) or _json_problem(item, depth + 1)
            if problem is not None:
                return problem
        return None
    return f"{_kind(value)} is not a JSON value (use None, bool, int, float, str, list or dict)"


def metadata_matches(metadata: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """The metadata filter rule every saver implements: each key of ``filter`` is a top-level key of ``metadata``
    whose value equals the filter's value by JSON equality, at any depth: numbers by value (``1`` equals ``1.0``),
    booleans only booleans (``true`` is not ``1``), objects regardless of key order, arrays element by element.
    Numbers compare exactly, as Python compares an int with a float (``-2**63`` does not equal ``-2**63 - 1``, which
    a double cannot tell apart), a number never equals a string (``1`` is not ``"1"``). A filter that is not JSON
    (NaN included) is refused by :func:`check_filter` before any saver matches it. Keys and values are data, never
    code or SQL."""
    return all(key in metadata and json_equal(metadata[key], value) for key, value in filter.items())


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values as :func:`metadata_matches` defines it."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def nul_free(value: Any) -> Any:
    """``value`` with every string and key mapped one to one so that it holds no NUL: U+FFFF becomes U+FFFF ``1``,
    then NUL becomes U+FFFF ``0``. For savers whose JSON functions cannot hold NUL (PostgreSQL's ``jsonb``) or stop at
    it (SQLite's ``json_each``): they map stored metadata that escapes either character the same way in SQL, so
    filters compare as :func:`metadata_matches` says."""
    if isinstance(value, str):
        if "\x00" not in value and "\uffff" not in value:
            return value
        return value.replace("\uffff", "\uffff1").replace("\x00", "\uffff0")
    if isinstance(value, Mapping):
        return {nul_free(k): nul_free(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [nul_free(v) for v in value]
    return value


# -- leases ----------------------------------------------------------------------------------------------------------


def thread_status(stored: str, lease: Lease | None, now: float) -> Status:
    """A thread's status as reads report it: ``crashed`` for a stored ``running`` whose lease expired or whose owner
    is a dead process of this host (one ``/proc`` read for a local owner: :meth:`Owner.dead`)."""
    if stored == "running" and lease is not None and not lease.live(now):
        return "crashed"
    return stored  # type: ignore[return-value]


def thread_busy(thread_id: str, lease: Lease, now: float) -> Exception:
    """The error refusing a claim of a thread whose lease is live."""
    return ThreadBusyError(
        f"thread {brief(thread_id)!r} is being run by {lease.describe(now)}; its lease runs "
        f"{max(0.0, lease.lease_until - now):.1f} s more (wait for it to finish or for its lease to expire, or take "
        "it over: `graphckpt resume --take-over`, resume(..., take_over=True); that process loses its next write)",
        thread_id=thread_id,
        lease=lease,
    )


def lease_from_columns(
    worker: str | None, host: str | None, pid: int | None, epoch: int, heartbeat_at: float | None, until: float | None
) -> Lease | None:
    """A thread row's lease columns as a :class:`Lease` (``None`` when the thread holds none)."""
    if worker is None or until is None:
        return None
    owner = Owner.from_columns(worker, host or "", int(pid or 0))
    return Lease(owner, int(epoch), float(heartbeat_at or 0.0), float(until))


def claim_lost(thread_id: str, record: ThreadRecord, now: float) -> Exception:
    """A claim lost the race (the head or the owner moved since it was read): the error names the winner, never
    our own expectation twice."""
    if record.lease is not None and record.status == "running":
        return (
            thread_busy(thread_id, record.lease, now)
            if record.lease.live(now)
            else ThreadConflictError(f"thread {brief(thread_id)!r} was claimed first by {record.lease.describe(now)}")
        )
    return ThreadConflictError(
        f"thread {brief(thread_id)!r} was claimed first by run {brief(record.run_id)} (it is {record.status} at "
        f"step {record.head_step} now)"
    )


def lease_lost(thread_id: str, lease: Lease | None, run_id: str, now: float) -> Exception:
    """The error for a write of run ``run_id`` on a thread that another claim took over since."""
    by = lease.describe(now) if lease is not None else "another run (which has finished or released it since)"
    return LeaseLostError(
        f"thread {brief(thread_id)!r} was taken over by {by}: this process (run {brief(run_id)}) lost its lease "
        "and stops without writing anything more",
        thread_id=thread_id,
        lease=lease,
    )
