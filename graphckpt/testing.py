"""``SaverConformance``: the suite every saver must pass. It is :mod:`graphckpt.savers.base` made executable.

A backend's test module subclasses it and provides one fixture, ``saver``, yielding an open saver::

    class TestMySaver(SaverConformance):
        @pytest.fixture
        async def saver(self):
            async with MySaver(...) as s:
                yield s

Every case is its own pytest item and uses only the public :class:`~graphckpt.savers.base.Saver` methods. Cases make
thread ids of their own and look only at those threads, so the saver may already hold other data. Bodies and blob
data are arbitrary bytes: a saver stores them and never looks inside.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

import pytest

from graphckpt.errors import SerializationError, ThreadConflictError, ThreadNotFoundError
from graphckpt.ids import new_id
from graphckpt.savers.base import (
    Blob,
    BlobRange,
    Saver,
    Status,
    StoredCheckpoint,
    StoredWrite,
    ThreadRecord,
    metadata_matches,
)

__all__ = ["SaverConformance", "make_checkpoint"]

HOSTILE_KEY = "a') OR 1=1 --"
HOSTILE_VALUE = '"; DROP TABLE checkpoints; --'


def make_checkpoint(
    thread_id: str,
    step: int,
    *,
    parent: StoredCheckpoint | None = None,
    status: Status = "running",
    metadata: Mapping[str, Any] | None = None,
    channels: Mapping[str, bytes] | None = None,
) -> StoredCheckpoint:
    """A checkpoint with a fresh id, child of ``parent`` (which may be in another thread: a fork). ``channels`` become
    snapshot blobs written at ``step``. The body is arbitrary bytes, including NUL and non-UTF-8."""
    return StoredCheckpoint(
        thread_id=thread_id,
        checkpoint_id=new_id(),
        parent_thread_id=parent.thread_id if parent is not None else None,
        parent_checkpoint_id=parent.checkpoint_id if parent is not None else None,
        step=step,
        created_at=1_700_000_000.25 + step,
        status=status,
        metadata={"source": "loop", "step": step} if metadata is None else metadata,
        body=b"\x00\xff body " + f"{thread_id}/{step}".encode(errors="backslashreplace"),
        blobs=[Blob(thread_id, ch, step, "snapshot", data) for ch, data in (channels or {}).items()],
    )


def _tid(name: str) -> str:
    """A thread id unique to this test run."""
    return f"{name}-{new_id()}"


async def _tick() -> None:
    """Let the wall clock move, so ``updated_at`` values differ even on a coarse clock."""
    await asyncio.sleep(0.02)


async def _chain(
    saver: Saver, thread_id: str, n: int, *, run_id: str, fork_from: StoredCheckpoint | None = None
) -> list[StoredCheckpoint]:
    """Commit ``n`` checkpoints to a new thread (a fork of ``fork_from`` when given), each writing blob ``x``."""
    out: list[StoredCheckpoint] = []
    parent, first = fork_from, 0 if fork_from is None else fork_from.step + 1
    for step in range(first, first + n):
        cp = make_checkpoint(thread_id, step, parent=parent, channels={"x": f"x{step}".encode()})
        await saver.commit(cp, expected_head=out[-1].checkpoint_id if out else None, run_id=run_id)
        out.append(cp)
        parent = cp
    return out


def _assert_stored(got: StoredCheckpoint | None, expected: StoredCheckpoint) -> None:
    """``got`` is ``expected`` as read back: every field equal, ``blobs`` empty."""
    assert got is not None, f"checkpoint {expected.checkpoint_id} of {expected.thread_id} not found"
    assert not got.blobs, "reads return blobs=()"
    assert got.created_at == pytest.approx(expected.created_at, abs=1e-6)
    assert dataclasses.replace(got, blobs=(), created_at=expected.created_at) == dataclasses.replace(expected, blobs=())


async def _row(saver: Saver, thread_id: str) -> ThreadRecord:
    """The thread's row, which must exist."""
    record = await saver.get_thread(thread_id)
    assert record is not None, f"thread {thread_id} not found"
    return record


def _ids(checkpoints: list[StoredCheckpoint]) -> list[str]:
    return [cp.checkpoint_id for cp in checkpoints]


def _threads(records: list[ThreadRecord], mine: list[str]) -> list[str]:
    """The ids of ``records`` that belong to this test, in the saver's order."""
    return [r.thread_id for r in records if r.thread_id in mine]


def _blob_keys(blobs: list[Blob]) -> list[tuple[str, str, int]]:
    return [(b.thread_id, b.channel, b.step) for b in blobs]


async def _assert_unchanged(saver: Saver, thread_id: str, head: StoredCheckpoint, rejected: StoredCheckpoint) -> None:
    """After a refused commit: the head did not move and nothing of ``rejected`` (row, blobs) was stored."""
    assert (await _row(saver, thread_id)).head_checkpoint_id == head.checkpoint_id
    _assert_stored(await saver.get_checkpoint(thread_id), head)
    assert await saver.get_checkpoint(thread_id, rejected.checkpoint_id) is None
    assert rejected.checkpoint_id not in _ids(await saver.list_checkpoints(thread_id))
    if rejected.step != head.step:
        assert await saver.get_checkpoint(thread_id, step=rejected.step) is None
        assert await saver.get_blobs([BlobRange(thread_id, "x", rejected.step, rejected.step)]) == []


class SaverConformance:
    """Subclass with an async ``saver`` fixture yielding an open :class:`~graphckpt.savers.base.Saver`."""

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def test_async_context_manager_returns_itself_and_reopens_lazily(self, saver: Saver) -> None:
        """``async with saver`` yields the saver and closes it on exit; a closed saver reopens on its next use
        and still holds what was committed."""
        run = new_id()
        [cp] = await _chain(saver, _tid("cm"), 1, run_id=run)
        async with saver as entered:
            assert entered is saver
            _assert_stored(await entered.get_checkpoint(cp.thread_id, cp.checkpoint_id), cp)
        _assert_stored(await saver.get_checkpoint(cp.thread_id), cp)
        await saver.aclose()
        await saver.aclose()  # idempotent
        _assert_stored(await saver.get_checkpoint(cp.thread_id), cp)

    async def test_setup_is_idempotent_and_keeps_data(self, saver: Saver) -> None:
        """``setup()`` may run any number of times; it never drops stored rows."""
        run = new_id()
        [cp] = await _chain(saver, _tid("setup"), 1, run_id=run)
        await saver.setup()
        await saver.setup()
        _assert_stored(await saver.get_checkpoint(cp.thread_id), cp)
        more = make_checkpoint(cp.thread_id, 1, parent=cp)
        await saver.commit(more, expected_head=cp.checkpoint_id, run_id=run)
        assert _ids(await saver.list_checkpoints(cp.thread_id)) == [more.checkpoint_id, cp.checkpoint_id]

    async def test_setup_without_create_opens_the_existing_store(self, saver: Saver) -> None:
        """``setup(create=False)`` on a store that is set up opens it as ``setup()`` does, with its data."""
        run = new_id()
        [cp] = await _chain(saver, _tid("nocreate"), 1, run_id=run)
        await saver.aclose()
        await saver.setup(create=False)
        await saver.setup(create=False)
        _assert_stored(await saver.get_checkpoint(cp.thread_id), cp)
        more = make_checkpoint(cp.thread_id, 1, parent=cp)
        await saver.commit(more, expected_head=cp.checkpoint_id, run_id=run)

    # -- reading checkpoints -----------------------------------------------------------------------------------------

    async def test_get_checkpoint_by_id_returns_what_was_committed(self, saver: Saver) -> None:
        """Every field comes back as committed: ids, parent, step, time, status, metadata (nested JSON), bytes."""
        t = _tid("get")
        meta = {
            "source": "input",
            "n": 3,
            "ok": True,
            "none": None,
            "ratio": 0.5,
            "usage": {"tokens": [1, 2]},
            "é": "✓",
        }
        first = make_checkpoint(t, 0, metadata=meta, status="interrupted")
        await saver.commit(first, expected_head=None, run_id=new_id())
        _assert_stored(await saver.get_checkpoint(t, first.checkpoint_id), first)

    async def test_get_checkpoint_by_step_and_head(self, saver: Saver) -> None:
        """``step=`` finds the checkpoint at that step; no id and no step gives the head."""
        cps = await _chain(saver, _tid("step"), 3, run_id=new_id())
        t = cps[0].thread_id
        for cp in cps:
            _assert_stored(await saver.get_checkpoint(t, step=cp.step), cp)
        _assert_stored(await saver.get_checkpoint(t), cps[-1])
        _assert_stored(await saver.get_checkpoint(t, None), cps[-1])

    async def test_get_checkpoint_unknown_returns_none(self, saver: Saver) -> None:
        """Unknown thread, unknown id, unknown step, or an id stored under another thread: ``None``."""
        [a] = await _chain(saver, _tid("a"), 1, run_id=new_id())
        [b] = await _chain(saver, _tid("b"), 1, run_id=new_id())
        assert await saver.get_checkpoint(_tid("nope")) is None
        assert await saver.get_checkpoint(_tid("nope"), a.checkpoint_id) is None
        assert await saver.get_checkpoint(a.thread_id, new_id()) is None
        assert await saver.get_checkpoint(a.thread_id, step=7) is None
        assert await saver.get_checkpoint(a.thread_id, b.checkpoint_id) is None

    async def test_list_checkpoints_newest_first(self, saver: Saver) -> None:
        """All checkpoints of the thread, highest step first, each as committed; an unknown thread lists nothing."""
        cps = await _chain(saver, _tid("list"), 4, run_id=new_id())
        listed = await saver.list_checkpoints(cps[0].thread_id)
        assert _ids(listed) == _ids(cps[::-1])
        for got, expected in zip(listed, cps[::-1], strict=True):
            _assert_stored(got, expected)
        assert await saver.list_checkpoints(_tid("nope")) == []

    async def test_list_checkpoints_limit(self, saver: Saver) -> None:
        """``limit`` keeps the newest ``limit`` checkpoints; 0 gives none; more than exist gives all."""
        cps = await _chain(saver, _tid("limit"), 4, run_id=new_id())
        t = cps[0].thread_id
        assert _ids(await saver.list_checkpoints(t, limit=2)) == _ids([cps[3], cps[2]])
        assert await saver.list_checkpoints(t, limit=0) == []
        assert _ids(await saver.list_checkpoints(t, limit=10)) == _ids(cps[::-1])

    async def test_list_checkpoints_before_step(self, saver: Saver) -> None:
        """``before_step`` is strict (``step < before_step``) and combines with ``limit`` (paging)."""
        cps = await _chain(saver, _tid("before"), 5, run_id=new_id())
        t = cps[0].thread_id
        assert _ids(await saver.list_checkpoints(t, before_step=3)) == _ids([cps[2], cps[1], cps[0]])
        assert _ids(await saver.list_checkpoints(t, before_step=3, limit=1)) == [cps[2].checkpoint_id]
        assert await saver.list_checkpoints(t, before_step=0) == []

    async def test_checkpoint_ids_sort_by_creation_time(self, saver: Saver) -> None:
        """Ids made later sort later, and the saver's newest-first order is the reverse of id order."""
        cps = await _chain(saver, _tid("ids"), 5, run_id=new_id())
        made = _ids(cps)
        assert sorted(made) == made
        listed = _ids(await saver.list_checkpoints(cps[0].thread_id))
        assert listed == sorted(made, reverse=True)

    # -- metadata filters --------------------------------------------------------------------------------------------

    async def _filter_thread(self, saver: Saver, metadatas: list[dict[str, Any]]) -> list[StoredCheckpoint]:
        t, run = _tid("filter"), new_id()
        out: list[StoredCheckpoint] = []
        for step, meta in enumerate(metadatas):
            cp = make_checkpoint(t, step, parent=out[-1] if out else None, metadata=meta)
            await saver.commit(cp, expected_head=out[-1].checkpoint_id if out else None, run_id=run)
            out.append(cp)
        return out

    async def test_filter_equality_on_a_top_level_key(self, saver: Saver) -> None:
        """A filter key matches checkpoints whose metadata has that key with an equal value; others are left out."""
        a, b, c = await self._filter_thread(saver, [{"source": "input"}, {"source": "loop"}, {"source": "loop"}])
        t = a.thread_id
        assert _ids(await saver.list_checkpoints(t, filter={"source": "loop"})) == _ids([c, b])
        assert _ids(await saver.list_checkpoints(t, filter={"source": "input"})) == [a.checkpoint_id]
        assert await saver.list_checkpoints(t, filter={"source": "fork"}) == []
        assert await saver.list_checkpoints(t, filter={"missing": "loop"}) == []
        assert _ids(await saver.list_checkpoints(t, filter={})) == _ids([c, b, a])

    async def test_filter_multiple_keys_must_all_match(self, saver: Saver) -> None:
        """Every key of the filter must match; filters combine with ``limit`` and ``before_step``."""
        a, b, c, d = await self._filter_thread(
            saver,
            [{"source": "loop", "node": "x"}, {"source": "loop", "node": "y"}, {"source": "update", "node": "x"},
             {"source": "loop", "node": "x", "extra": 1}],
        )  # fmt: skip
        t = a.thread_id
        assert _ids(await saver.list_checkpoints(t, filter={"source": "loop", "node": "x"})) == _ids([d, a])
        assert _ids(await saver.list_checkpoints(t, filter={"source": "loop", "node": "x"}, limit=2)) == _ids([d, a])
        got = await saver.list_checkpoints(t, filter={"source": "loop"}, before_step=3)
        assert _ids(got) == _ids([b, a])
        assert c.checkpoint_id not in _ids(await saver.list_checkpoints(t, filter={"node": "x", "source": "loop"}))

    async def test_filter_non_string_values_use_json_equality(self, saver: Saver) -> None:
        """Ints, bools, null, lists and nested objects compare as JSON values: ``true`` is not ``1``, a nested
        object must be equal (not merely contain the filter; key order does not matter), ``null`` matches only a
        key that is present with ``null``."""
        a, b, c = await self._filter_thread(
            saver,
            [{"n": 1, "flag": True, "usage": {"in": 5, "out": 7}, "tags": ["x", "y"], "gone": None},
             {"n": 2, "flag": False, "usage": {"in": 5}, "tags": ["x"]},
             {"n": True, "flag": 1, "usage": {"out": 7, "in": 5}, "tags": ["y", "x"]}],
        )  # fmt: skip
        t = a.thread_id

        async def match(flt: dict[str, Any]) -> list[str]:
            return _ids(await saver.list_checkpoints(t, filter=flt))

        assert await match({"n": 1}) == [a.checkpoint_id]
        assert await match({"n": 2, "flag": False}) == [b.checkpoint_id]
        assert await match({"flag": True}) == [a.checkpoint_id]
        assert await match({"n": True}) == [c.checkpoint_id]
        assert await match({"n": "1"}) == []
        assert await match({"usage": {"in": 5, "out": 7}}) == _ids([c, a])
        assert await match({"usage": {"in": 5}}) == [b.checkpoint_id]
        assert await match({"tags": ["x"]}) == [b.checkpoint_id]
        assert await match({"tags": ["x", "y"]}) == [a.checkpoint_id]
        assert await match({"gone": None}) == [a.checkpoint_id]

    async def test_filter_numbers_compare_by_value_at_any_depth(self, saver: Saver) -> None:
        """``1`` equals ``1.0`` at the top level and inside objects and arrays (JSON numbers), but not ``true``."""
        a, b = await self._filter_thread(
            saver, [{"w": 1.0, "tags": {"w": 1.0, "l": [2.0, 0.5]}}, {"w": True, "tags": {"w": True, "l": [2, 0.5]}}]
        )
        t = a.thread_id
        assert _ids(await saver.list_checkpoints(t, filter={"w": 1})) == [a.checkpoint_id]
        assert _ids(await saver.list_checkpoints(t, filter={"tags": {"w": 1, "l": [2, 0.5]}})) == [a.checkpoint_id]
        assert _ids(await saver.list_checkpoints(t, filter={"tags": {"w": True, "l": [2.0, 0.5]}})) == [b.checkpoint_id]

    async def test_filter_nul_backslashes_and_big_integers(self, saver: Saver) -> None:
        """Strings and keys holding NUL, U+FFFF or backslashes, and integers beyond 64 bits, filter exactly as
        :func:`~graphckpt.savers.base.metadata_matches` says (SQL JSON functions may stop at NUL or round big
        numbers); a checkpoint holding NUL does not break the filters of its thread."""
        metas: list[dict[str, Any]] = [
            {"tags": {"user": "a\x00b"}, "o": {"p": "c:\\d", "q": "\x00"}},
            {"tags": {"user": "a\uffff0b"}},  # what a careless NUL mapping would turn "a\x00b" into
            {"tags": {"user": "a\\u0000b"}, "user": "a"},  # a backslash, then the letters u0000
            {"k\x00": 1, "tags": {"user": "ab"}, "user": "a\x00"},
            {"k\x00": 1.0, "tags": {"user": "\x00\x00\uffff"}, "big": 10**30},
            {"source": "loop", "big": 10**30 + 1, "neg": -(10**40)},
        ]
        cps = await self._filter_thread(saver, metas)
        filters: list[dict[str, Any]] = [
            {"tags": {"user": "a\x00b"}},
            {"tags": {"user": "a\uffff0b"}},
            {"tags": {"user": "a\\u0000b"}},
            {"tags": {"user": "ab"}},
            {"tags": {"user": "a"}},
            {"o": {"p": "c:\\d", "q": "\x00"}},
            {"o": {"p": "c:\\d", "q": ""}},
            {"user": "a"},
            {"user": "a\x00"},
            {"k\x00": 1},
            {"k": 1},
            {"tags": {"user": "\x00\x00\uffff"}},
            {"big": 10**30},
            {"big": 10**30 + 1},
            {"neg": -(10**40)},
            {"source": "loop"},
        ]
        t = cps[0].thread_id
        for flt in filters:
            expected = [cps[i].checkpoint_id for i in reversed(range(len(metas))) if metadata_matches(metas[i], flt)]
            assert _ids(await saver.list_checkpoints(t, filter=flt)) == expected, flt
        assert [dict(cp.metadata) for cp in await saver.list_checkpoints(t)] == metas[::-1]

    async def test_filter_keys_are_top_level_names_not_paths(self, saver: Saver) -> None:
        """A key such as ``usage.in`` or ``$.source`` names a top-level key literally; it is never a JSON path."""
        a, b = await self._filter_thread(saver, [{"usage": {"in": 5}, "source": "x"}, {"usage.in": 5, "$.source": "x"}])
        t = a.thread_id
        assert _ids(await saver.list_checkpoints(t, filter={"usage.in": 5})) == [b.checkpoint_id]
        assert _ids(await saver.list_checkpoints(t, filter={"$.source": "x"})) == [b.checkpoint_id]
        assert _ids(await saver.list_checkpoints(t, filter={"source": "x"})) == [a.checkpoint_id]

    async def test_filter_hostile_keys_and_values_are_only_data(self, saver: Saver) -> None:
        """SQL in filter keys, values and thread ids is matched as text: no extra match, no damage, and a
        checkpoint that stores those very strings is found by them."""
        t = _tid("x'; DROP TABLE threads; --")
        run = new_id()
        a = make_checkpoint(t, 0, metadata={"source": "input", "note": "plain"}, channels={"x": b"0"})
        b = make_checkpoint(t, 1, parent=a, metadata={"source": "loop", HOSTILE_KEY: HOSTILE_VALUE, 'k"]': "v'"})
        await saver.commit(a, expected_head=None, run_id=run)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        for flt in (
            {HOSTILE_KEY: "x"},
            {"source": HOSTILE_VALUE},
            {"note": "plain' OR '1'='1"},
            {"source": "input' OR 1=1 --"},
            {'k"]': "v"},
            {"x') OR ('1'='1": 1},
        ):
            assert await saver.list_checkpoints(t, filter=flt) == [], flt
        assert _ids(await saver.list_checkpoints(t, filter={HOSTILE_KEY: HOSTILE_VALUE})) == [b.checkpoint_id]
        assert _ids(await saver.list_checkpoints(t, filter={'k"]': "v'"})) == [b.checkpoint_id]
        # every table is intact and still writable
        _assert_stored(await saver.get_checkpoint(t, b.checkpoint_id), b)
        assert _ids(await saver.list_checkpoints(t)) == _ids([b, a])
        assert t in _threads(await saver.list_threads(), [t])
        assert _blob_keys(await saver.get_blobs([BlobRange(t, "x", 0, 9)])) == [(t, "x", 0)]
        c = make_checkpoint(t, 2, parent=b)
        await saver.commit(c, expected_head=b.checkpoint_id, run_id=run)
        _assert_stored(await saver.get_checkpoint(t), c)

    # -- blobs -------------------------------------------------------------------------------------------------------

    async def test_blobs_are_stored_with_their_checkpoint(self, saver: Saver) -> None:
        """The blobs of a commit come back whole (thread, channel, step, kind, bytes), several channels at once."""
        t, run = _tid("blobs"), new_id()
        a = make_checkpoint(t, 0, channels={"notes": b"\x00snap", "verdict": b"v0"})
        b = dataclasses.replace(make_checkpoint(t, 1, parent=a), blobs=[Blob(t, "notes", 1, "delta", b"\xffdelta1")])
        await saver.commit(a, expected_head=None, run_id=run)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        got = await saver.get_blobs([BlobRange(t, "notes", 0, 1), BlobRange(t, "verdict", 0, 1)])
        assert got == [*a.blobs[:1], *b.blobs, *a.blobs[1:]]

    async def test_get_thread_and_checkpoint_reads_both(self, saver: Saver) -> None:
        """The thread row and one of its checkpoints, by id or step; the checkpoint is ``None`` when it is not the
        thread's (or the id and step disagree), both are ``None`` when the thread does not exist or was deleted."""
        t, run = _tid("both"), new_id()
        cps = await _chain(saver, t, 3, run_id=run)
        record, cp = await saver.get_thread_and_checkpoint(t, cps[1].checkpoint_id)
        assert record is not None and record.head_checkpoint_id == cps[2].checkpoint_id
        _assert_stored(cp, cps[1])
        _assert_stored((await saver.get_thread_and_checkpoint(t, step=0))[1], cps[0])
        _assert_stored((await saver.get_thread_and_checkpoint(t, cps[2].checkpoint_id, step=2))[1], cps[2])
        assert (await saver.get_thread_and_checkpoint(t, cps[2].checkpoint_id, step=1))[1] is None
        assert (await saver.get_thread_and_checkpoint(t, "no-such-checkpoint"))[1] is None
        assert (await saver.get_thread_and_checkpoint(t, step=7))[1] is None
        other = _tid("both-other")
        await _chain(saver, other, 1, run_id=run)
        assert (await saver.get_thread_and_checkpoint(other, cps[1].checkpoint_id))[1] is None
        assert await saver.get_thread_and_checkpoint(_tid("missing"), step=0) == (None, None)
        await saver.delete_thread(t)
        assert await saver.get_thread_and_checkpoint(t, cps[1].checkpoint_id) == (None, None)

    async def test_a_chunk_replaces_the_deltas_it_packs(self, saver: Saver) -> None:
        """A ``chunk`` at step ``a`` committed with the checkpoint at step ``b``: the channel's rows of that thread
        with ``a < step < b`` go, the row at ``a`` is replaced; other channels, other threads, rows outside the
        range and a rejected commit's rows stay."""
        t, other, run = _tid("chunk"), _tid("chunk-other"), new_id()
        cps = await _chain(saver, t, 6, run_id=run)  # blobs x0..x5 (snapshots here; kinds are opaque to the saver)
        await _chain(saver, other, 3, run_id=run)
        y = dataclasses.replace(make_checkpoint(t, 6, parent=cps[-1]), blobs=[Blob(t, "y", 6, "delta", b"y6")])
        await saver.commit(y, expected_head=cps[-1].checkpoint_id, run_id=run)
        chunk = Blob(t, "x", 2, "chunk", b"\x00packed x2..x7\xff")
        stale = dataclasses.replace(make_checkpoint(t, 7, parent=cps[-1]), blobs=[chunk])
        with pytest.raises(ThreadConflictError):  # wrong head: nothing is deleted
            await saver.commit(stale, expected_head=cps[-1].checkpoint_id, run_id=run)
        assert len(await saver.get_blobs([BlobRange(t, "x", 0, 9)])) == 6
        packed = dataclasses.replace(make_checkpoint(t, 7, parent=y), blobs=[chunk, Blob(t, "y", 7, "delta", b"y7")])
        await saver.commit(packed, expected_head=y.checkpoint_id, run_id=run)
        got = await saver.get_blobs([BlobRange(t, "x", 0, 9)])
        assert [(b.step, b.kind, b.data) for b in got] == [(0, "snapshot", b"x0"), (1, "snapshot", b"x1"),
                                                           (2, "chunk", chunk.data)]  # fmt: skip
        assert await saver.get_blobs([BlobRange(t, "x", 2, 2)]) == [chunk]
        assert await saver.get_blobs([BlobRange(t, "x", 3, 9)]) == []
        assert _blob_keys(await saver.get_blobs([BlobRange(t, "y", 0, 9)])) == [(t, "y", 6), (t, "y", 7)]
        assert _blob_keys(await saver.get_blobs([BlobRange(other, "x", 0, 9)])) == [(other, "x", s) for s in range(3)]

    async def test_get_blobs_range_is_inclusive_on_both_ends(self, saver: Saver) -> None:
        """``min_step <= step <= max_step``."""
        cps = await _chain(saver, _tid("range"), 5, run_id=new_id())
        t = cps[0].thread_id
        got = await saver.get_blobs([BlobRange(t, "x", 1, 3)])
        assert _blob_keys(got) == [(t, "x", 1), (t, "x", 2), (t, "x", 3)]
        assert [b.data for b in got] == [b"x1", b"x2", b"x3"]

    async def test_get_blobs_across_threads_ordered_by_channel_then_step(self, saver: Saver) -> None:
        """Ranges over a fork and its source come back in one list ordered by ``(channel, step)``, whatever the
        order of the ranges."""
        run = new_id()
        src = await _chain(saver, _tid("src"), 3, run_id=run)
        fork = await _chain(saver, _tid("fork"), 2, run_id=run, fork_from=src[1])
        s, f = src[0].thread_id, fork[0].thread_id
        ranges = [BlobRange(f, "x", 2, 9), BlobRange(s, "x", 0, 1)]
        assert _blob_keys(await saver.get_blobs(ranges)) == [(s, "x", 0), (s, "x", 1), (f, "x", 2), (f, "x", 3)]
        extra = make_checkpoint(f, 4, parent=fork[-1], channels={"a": b"a4", "z": b"z4"})
        await saver.commit(extra, expected_head=fork[-1].checkpoint_id, run_id=run)
        ranges = [BlobRange(f, "z", 0, 9), BlobRange(f, "x", 0, 9), BlobRange(s, "x", 0, 1), BlobRange(f, "a", 0, 9)]
        assert _blob_keys(await saver.get_blobs(ranges)) == [
            (f, "a", 4), (s, "x", 0), (s, "x", 1), (f, "x", 2), (f, "x", 3), (f, "z", 4),
        ]  # fmt: skip

    async def test_get_blobs_empty_results(self, saver: Saver) -> None:
        """No ranges, an empty range, an unknown channel or thread, or another thread's steps: no blobs."""
        cps = await _chain(saver, _tid("empty"), 2, run_id=new_id())
        t = cps[0].thread_id
        assert await saver.get_blobs([]) == []
        assert await saver.get_blobs([BlobRange(t, "x", 1, 0)]) == []
        assert await saver.get_blobs([BlobRange(t, "x", 5, 9)]) == []
        assert await saver.get_blobs([BlobRange(t, "nope", 0, 9)]) == []
        assert await saver.get_blobs([BlobRange(_tid("nope"), "x", 0, 9)]) == []

    async def test_get_blobs_overlapping_ranges_return_each_blob_once(self, saver: Saver) -> None:
        """A blob inside several ranges is returned once."""
        cps = await _chain(saver, _tid("overlap"), 3, run_id=new_id())
        t = cps[0].thread_id
        got = await saver.get_blobs([BlobRange(t, "x", 0, 1), BlobRange(t, "x", 1, 2), BlobRange(t, "x", 0, 2)])
        assert _blob_keys(got) == [(t, "x", 0), (t, "x", 1), (t, "x", 2)]

    # -- pending writes ----------------------------------------------------------------------------------------------

    async def test_writes_are_ordered_by_task_kind_index(self, saver: Saver) -> None:
        """``get_writes`` orders by ``(task_id, kind, index)``, with ``index`` compared as a number."""
        run = new_id()
        [cp] = await _chain(saver, _tid("writes"), 1, run_id=run)
        w = [
            StoredWrite("task1", "effect", 0, b"e0"),
            StoredWrite("task1", "effect", 2, b"e2"),
            StoredWrite("task1", "effect", 10, b"e10"),
            StoredWrite("task1", "interrupt", 0, b"i0"),
            StoredWrite("task1", "resume", 0, b"r0"),
            StoredWrite("task2", "effect", 1, b"\x00"),
        ]
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [w[5], w[4]], run_id=run)
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [w[2], w[0], w[3], w[1]], run_id=run)
        assert await saver.get_writes(cp.thread_id, cp.checkpoint_id) == w
        assert await saver.get_writes(cp.thread_id, new_id()) == []
        assert await saver.get_writes(_tid("nope"), cp.checkpoint_id) == []

    async def test_write_with_the_same_key_replaces_the_stored_one(self, saver: Saver) -> None:
        """A write with an existing ``(task_id, kind, index)`` replaces it; other writes stay."""
        run = new_id()
        [cp] = await _chain(saver, _tid("replace"), 1, run_id=run)
        first, other = StoredWrite("t", "result", 0, b"old"), StoredWrite("t", "result", 1, b"keep")
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [first, other], run_id=run)
        await saver.put_writes(cp.thread_id, cp.checkpoint_id, [StoredWrite("t", "result", 0, b"new")], run_id=run)
        assert await saver.get_writes(cp.thread_id, cp.checkpoint_id) == [StoredWrite("t", "result", 0, b"new"), other]

    async def test_writes_of_the_parent_are_deleted_when_the_child_commits(self, saver: Saver) -> None:
        """Committing a child deletes the writes recorded against its parent, and only those."""
        run = new_id()
        [a] = await _chain(saver, _tid("a"), 1, run_id=run)
        [other] = await _chain(saver, _tid("other"), 1, run_id=run)
        w = [StoredWrite("t", "result", 0, b"r")]
        await saver.put_writes(a.thread_id, a.checkpoint_id, w, run_id=run)
        await saver.put_writes(other.thread_id, other.checkpoint_id, w, run_id=run)
        b = make_checkpoint(a.thread_id, 1, parent=a)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
        assert await saver.get_writes(other.thread_id, other.checkpoint_id) == w
        await saver.put_writes(b.thread_id, b.checkpoint_id, w, run_id=run)
        assert await saver.get_writes(b.thread_id, b.checkpoint_id) == w

    async def test_put_writes_with_status_changes_thread_status_and_error(self, saver: Saver) -> None:
        """``status``/``error`` go to the thread row with the writes; the next commit takes the checkpoint's status
        and clears ``error``."""
        run = new_id()
        [a] = await _chain(saver, _tid("status"), 1, run_id=run)
        t = a.thread_id
        w = [StoredWrite("n", "error", 0, b"E")]
        await saver.put_writes(t, a.checkpoint_id, w, run_id=run, status="failed", error="ValueError: boom")
        row = await _row(saver, t)
        assert (row.status, row.error) == ("failed", "ValueError: boom")
        assert await saver.get_writes(t, a.checkpoint_id) == w
        await saver.put_writes(t, a.checkpoint_id, [], run_id=run, status="interrupted")
        row = await _row(saver, t)
        assert (row.status, row.error) == ("interrupted", None)
        await saver.put_writes(t, a.checkpoint_id, [], run_id=run, status="failed", error="boom")
        b = make_checkpoint(t, 1, parent=a, status="done")
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        row = await _row(saver, t)
        assert (row.status, row.error, row.head_checkpoint_id) == ("done", None, b.checkpoint_id)

    async def test_put_writes_on_a_checkpoint_that_is_not_the_head_conflicts(self, saver: Saver) -> None:
        """Writes go only against the head; against an older checkpoint nothing is written or changed."""
        run = new_id()
        a, b = await _chain(saver, _tid("nothead"), 2, run_id=run)
        w = [StoredWrite("t", "result", 0, b"r")]
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(a.thread_id, a.checkpoint_id, w, run_id=run, status="failed", error="x")
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
        row = await _row(saver, a.thread_id)
        assert (row.status, row.error, row.head_checkpoint_id) == ("running", None, b.checkpoint_id)

    async def test_put_writes_with_a_wrong_run_id_conflicts(self, saver: Saver) -> None:
        """Only the owning run writes; another run id conflicts and nothing is written or changed."""
        [a] = await _chain(saver, _tid("wrongrun"), 1, run_id=new_id())
        w = [StoredWrite("t", "result", 0, b"r")]
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(a.thread_id, a.checkpoint_id, w, run_id=new_id(), status="failed", error="x")
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []
        row = await _row(saver, a.thread_id)
        assert (row.status, row.error) == ("running", None)

    # -- commit: compare-and-set -------------------------------------------------------------------------------------

    async def test_commit_creating_an_existing_thread_conflicts(self, saver: Saver) -> None:
        """``expected_head=None`` means "create the thread"; if it exists, nothing is written."""
        run = new_id()
        [a] = await _chain(saver, _tid("exists"), 1, run_id=run)
        again = make_checkpoint(a.thread_id, 1)
        with pytest.raises(ThreadConflictError):
            await saver.commit(again, expected_head=None, run_id=run)
        await _assert_unchanged(saver, a.thread_id, a, again)

    async def test_commit_with_a_wrong_expected_head_conflicts(self, saver: Saver) -> None:
        """A stale ``expected_head`` conflicts; nothing is written and the parent's writes survive."""
        run = new_id()
        a, b = await _chain(saver, _tid("stale"), 2, run_id=run)
        await saver.put_writes(b.thread_id, b.checkpoint_id, [StoredWrite("t", "result", 0, b"r")], run_id=run)
        late = make_checkpoint(a.thread_id, 2, parent=b, channels={"x": b"late"})
        for wrong in (a.checkpoint_id, new_id()):
            with pytest.raises(ThreadConflictError):
                await saver.commit(late, expected_head=wrong, run_id=run)
            await _assert_unchanged(saver, a.thread_id, b, late)
        assert await saver.get_writes(b.thread_id, b.checkpoint_id) == [StoredWrite("t", "result", 0, b"r")]

    async def test_commit_with_a_wrong_run_id_conflicts(self, saver: Saver) -> None:
        """The head matches but the run does not own the thread: conflict, nothing written."""
        [a] = await _chain(saver, _tid("notowner"), 1, run_id=new_id())
        b = make_checkpoint(a.thread_id, 1, parent=a, channels={"x": b"b"})
        with pytest.raises(ThreadConflictError):
            await saver.commit(b, expected_head=a.checkpoint_id, run_id=new_id())
        await _assert_unchanged(saver, a.thread_id, a, b)

    async def test_commit_at_an_existing_step_conflicts(self, saver: Saver) -> None:
        """Steps are unique within a thread: a second checkpoint at a used step conflicts, nothing written."""
        run = new_id()
        a, b = await _chain(saver, _tid("samestep"), 2, run_id=run)
        dup = make_checkpoint(a.thread_id, 1, parent=b)
        with pytest.raises(ThreadConflictError):
            await saver.commit(dup, expected_head=b.checkpoint_id, run_id=run)
        await _assert_unchanged(saver, a.thread_id, b, dup)
        _assert_stored(await saver.get_checkpoint(a.thread_id, step=1), b)

    async def test_commit_to_an_unknown_thread_with_an_expected_head_fails(self, saver: Saver) -> None:
        """An ``expected_head`` on a thread that does not exist cannot match: the commit fails, nothing written."""
        t = _tid("ghost")
        cp = make_checkpoint(t, 1)
        with pytest.raises((ThreadConflictError, ThreadNotFoundError)):
            await saver.commit(cp, expected_head=new_id(), run_id=new_id())
        assert await saver.get_thread(t) is None
        assert await saver.get_checkpoint(t, cp.checkpoint_id) is None

    async def test_concurrent_commits_exactly_one_wins(self, saver: Saver) -> None:
        """Two writers racing from the same head: one commits, the other gets ``ThreadConflictError``."""
        run = new_id()
        [a] = await _chain(saver, _tid("race"), 1, run_id=run)
        one, two = (make_checkpoint(a.thread_id, 1, parent=a, channels={"x": n}) for n in (b"1", b"2"))
        results = await asyncio.gather(
            saver.commit(one, expected_head=a.checkpoint_id, run_id=run),
            saver.commit(two, expected_head=a.checkpoint_id, run_id=run),
            return_exceptions=True,
        )
        assert sorted(type(r).__name__ for r in results) == ["NoneType", "ThreadConflictError"], results
        winner, loser = (one, two) if results[0] is None else (two, one)
        _assert_stored(await saver.get_checkpoint(a.thread_id), winner)
        assert await saver.get_checkpoint(a.thread_id, loser.checkpoint_id) is None
        assert await saver.get_blobs([BlobRange(a.thread_id, "x", 1, 1)]) == list(winner.blobs)

    # -- claim -------------------------------------------------------------------------------------------------------

    async def test_claim_transfers_ownership_and_sets_running(self, saver: Saver) -> None:
        """A claim with the right head and owner makes the new run the owner and the thread ``running``."""
        old, new = new_id(), new_id()
        [a] = await _chain(saver, _tid("claim"), 1, run_id=old)
        await saver.put_writes(a.thread_id, a.checkpoint_id, [], run_id=old, status="failed", error="boom")
        await saver.claim(a.thread_id, expected_head=a.checkpoint_id, expected_run_id=old, run_id=new)
        row = await _row(saver, a.thread_id)
        assert (row.run_id, row.status, row.head_checkpoint_id) == (new, "running", a.checkpoint_id)
        b = make_checkpoint(a.thread_id, 1, parent=a)
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=new)
        _assert_stored(await saver.get_checkpoint(a.thread_id), b)

    async def test_claim_with_a_wrong_head_or_owner_conflicts(self, saver: Saver) -> None:
        """A stale head or a previous owner that is no longer the owner conflicts; the owner does not change."""
        old = new_id()
        a, b = await _chain(saver, _tid("claimcas"), 2, run_id=old)
        with pytest.raises(ThreadConflictError):
            await saver.claim(a.thread_id, expected_head=a.checkpoint_id, expected_run_id=old, run_id=new_id())
        with pytest.raises(ThreadConflictError):
            await saver.claim(a.thread_id, expected_head=b.checkpoint_id, expected_run_id=new_id(), run_id=new_id())
        assert (await _row(saver, a.thread_id)).run_id == old

    async def test_claim_of_an_unknown_thread_is_not_found(self, saver: Saver) -> None:
        with pytest.raises(ThreadNotFoundError):
            await saver.claim(_tid("nope"), expected_head=new_id(), expected_run_id=new_id(), run_id=new_id())

    async def test_the_old_run_cannot_write_after_a_claim(self, saver: Saver) -> None:
        """After a claim, commits and writes with the previous run id conflict and change nothing."""
        old, new = new_id(), new_id()
        [a] = await _chain(saver, _tid("takeover"), 1, run_id=old)
        await saver.claim(a.thread_id, expected_head=a.checkpoint_id, expected_run_id=old, run_id=new)
        b = make_checkpoint(a.thread_id, 1, parent=a, channels={"x": b"b"})
        with pytest.raises(ThreadConflictError):
            await saver.commit(b, expected_head=a.checkpoint_id, run_id=old)
        await _assert_unchanged(saver, a.thread_id, a, b)
        with pytest.raises(ThreadConflictError):
            await saver.put_writes(a.thread_id, a.checkpoint_id, [StoredWrite("t", "result", 0, b"r")], run_id=old)
        assert await saver.get_writes(a.thread_id, a.checkpoint_id) == []

    # -- threads -----------------------------------------------------------------------------------------------------

    async def test_thread_record_follows_the_head(self, saver: Saver) -> None:
        """The thread row takes each new head's id, step, status and metadata; ``created_at`` stays,
        ``updated_at`` moves forward."""
        run = new_id()
        t = _tid("head")
        a = make_checkpoint(t, 0, metadata={"source": "input"})
        await saver.commit(a, expected_head=None, run_id=run)
        first = await _row(saver, t)
        times = (first.created_at, first.updated_at)
        assert first == ThreadRecord(t, a.checkpoint_id, 0, "running", run, *times, metadata={"source": "input"})
        assert first.created_at <= first.updated_at
        await _tick()
        b = make_checkpoint(t, 1, parent=a, status="interrupted", metadata={"source": "loop", "n": 1})
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        second = await _row(saver, t)
        assert second == dataclasses.replace(
            first, head_checkpoint_id=b.checkpoint_id, head_step=1, status="interrupted",
            metadata={"source": "loop", "n": 1}, updated_at=second.updated_at,
        )  # fmt: skip
        assert second.updated_at > first.updated_at

    async def test_get_thread_of_an_unknown_thread_is_none(self, saver: Saver) -> None:
        assert await saver.get_thread(_tid("nope")) is None

    async def test_list_threads_most_recently_updated_first(self, saver: Saver) -> None:
        """``list_threads`` orders by ``updated_at``, newest first; a commit moves a thread to the front."""
        run = new_id()
        mine: list[str] = []
        heads: dict[str, StoredCheckpoint] = {}
        for name in ("a", "b", "c"):
            [heads[name]] = await _chain(saver, _tid(name), 1, run_id=run)
            mine.append(heads[name].thread_id)
            await _tick()
        a, b, c = mine
        assert _threads(await saver.list_threads(), mine) == [c, b, a]
        await saver.commit(make_checkpoint(a, 1, parent=heads["a"]), expected_head=heads["a"].checkpoint_id, run_id=run)
        records = await saver.list_threads()
        assert _threads(records, mine) == [a, c, b]
        assert [r.updated_at for r in records] == sorted((r.updated_at for r in records), reverse=True)

    async def test_list_threads_filters_by_status(self, saver: Saver) -> None:
        """``status=`` keeps only threads whose row has that status, including a status set by ``put_writes``."""
        run = new_id()
        done, failed, running = _tid("done"), _tid("failed"), _tid("running")
        await saver.commit(make_checkpoint(done, 0, status="done"), expected_head=None, run_id=run)
        [f] = await _chain(saver, failed, 1, run_id=run)
        await saver.put_writes(failed, f.checkpoint_id, [], run_id=run, status="failed", error="boom")
        await _chain(saver, running, 1, run_id=run)
        mine = [done, failed, running]
        assert sorted(_threads(await saver.list_threads(), mine)) == sorted(mine)
        cases: list[tuple[Status, list[str]]] = [("done", [done]), ("failed", [failed]), ("running", [running])]
        for status, expected in [*cases, ("interrupted", [])]:
            records = await saver.list_threads(status=status)
            assert _threads(records, mine) == expected
            assert all(r.status == status for r in records)

    # -- forks -------------------------------------------------------------------------------------------------------

    async def test_fork_records_its_lineage_and_leaves_the_source_unchanged(self, saver: Saver) -> None:
        """A fork is a new thread whose first checkpoint's parent is in the source thread. Its row names the
        source thread and checkpoint; it stores only its own checkpoints; the source (row, checkpoints, writes) is
        untouched."""
        run = new_id()
        src = await _chain(saver, _tid("src"), 3, run_id=run)
        s = src[0].thread_id
        w = [StoredWrite("t", "result", 0, b"r")]
        await saver.put_writes(s, src[-1].checkpoint_id, w, run_id=run)
        before = await saver.get_thread(s)
        fork = await _chain(saver, _tid("fork"), 2, run_id=new_id(), fork_from=src[2])
        f = fork[0].thread_id
        assert (fork[0].parent_thread_id, fork[0].parent_checkpoint_id) == (s, src[2].checkpoint_id)
        _assert_stored(await saver.get_checkpoint(f, fork[0].checkpoint_id), fork[0])
        row = await _row(saver, f)
        assert (row.parent_thread_id, row.parent_checkpoint_id) == (s, src[2].checkpoint_id)
        assert row.head_checkpoint_id == fork[1].checkpoint_id
        assert _ids(await saver.list_checkpoints(f)) == _ids(fork[::-1])
        assert await saver.get_checkpoint(f, step=2) is None
        assert await saver.get_checkpoint(f, src[2].checkpoint_id) is None
        assert await saver.get_thread(s) == before
        assert _ids(await saver.list_checkpoints(s)) == _ids(src[::-1])
        assert await saver.get_writes(s, src[-1].checkpoint_id) == w

    # -- deleting threads --------------------------------------------------------------------------------------------

    async def test_delete_thread_removes_it_everywhere(self, saver: Saver) -> None:
        """A deleted thread without forks is gone: row, list entry, head, checkpoints, blobs and writes."""
        run = new_id()
        cps = await _chain(saver, _tid("del"), 2, run_id=run)
        [keep] = await _chain(saver, _tid("keep"), 1, run_id=run)
        t = cps[0].thread_id
        await saver.put_writes(t, cps[1].checkpoint_id, [StoredWrite("t", "result", 0, b"r")], run_id=run)
        await saver.delete_thread(t)
        assert await saver.get_thread(t) is None
        assert _threads(await saver.list_threads(), [t, keep.thread_id]) == [keep.thread_id]
        assert await saver.get_checkpoint(t) is None
        for cp in cps:
            assert await saver.get_checkpoint(t, cp.checkpoint_id) is None
        assert await saver.list_checkpoints(t) == []
        assert await saver.get_blobs([BlobRange(t, "x", 0, 9)]) == []
        assert await saver.get_writes(t, cps[1].checkpoint_id) == []
        _assert_stored(await saver.get_checkpoint(keep.thread_id), keep)

    async def test_delete_of_an_unknown_thread_is_not_found(self, saver: Saver) -> None:
        """Deleting a thread that never existed, or twice, raises ``ThreadNotFoundError``."""
        with pytest.raises(ThreadNotFoundError):
            await saver.delete_thread(_tid("nope"))
        [a] = await _chain(saver, _tid("twice"), 1, run_id=new_id())
        await saver.delete_thread(a.thread_id)
        with pytest.raises(ThreadNotFoundError):
            await saver.delete_thread(a.thread_id)

    async def test_deleted_thread_id_can_be_reused(self, saver: Saver) -> None:
        """With no fork depending on it, a deleted thread's id starts afresh: none of the old rows show."""
        old = await _chain(saver, _tid("reuse"), 3, run_id=new_id())
        t = old[0].thread_id
        await saver.delete_thread(t)
        [new] = await _chain(saver, t, 1, run_id=new_id())
        assert _ids(await saver.list_checkpoints(t)) == [new.checkpoint_id]
        assert _blob_keys(await saver.get_blobs([BlobRange(t, "x", 0, 9)])) == [(t, "x", 0)]
        assert (await saver.get_blobs([BlobRange(t, "x", 0, 0)]))[0].data == b"x0"
        assert await saver.get_checkpoint(t, old[2].checkpoint_id) is None

    async def test_delete_keeps_the_lineage_a_fork_needs(self, saver: Saver) -> None:
        """Deleting a fork's source keeps its checkpoints and blobs up to the fork point, readable by id; later
        ones are gone; the thread itself is gone; the fork is untouched."""
        run = new_id()
        src = await _chain(saver, _tid("src"), 4, run_id=run)
        fork = await _chain(saver, _tid("fork"), 2, run_id=run, fork_from=src[1])
        s, f = src[0].thread_id, fork[0].thread_id
        fork_before = await saver.get_thread(f)
        await saver.delete_thread(s)
        assert await saver.get_thread(s) is None
        assert _threads(await saver.list_threads(), [s, f]) == [f]
        assert await saver.get_checkpoint(s) is None
        for cp in src[:2]:
            _assert_stored(await saver.get_checkpoint(s, cp.checkpoint_id), cp)
        for cp in src[2:]:
            assert await saver.get_checkpoint(s, cp.checkpoint_id) is None
        assert _blob_keys(await saver.get_blobs([BlobRange(s, "x", 0, 9)])) == [(s, "x", 0), (s, "x", 1)]
        assert await saver.get_thread(f) == fork_before
        assert _ids(await saver.list_checkpoints(f)) == _ids(fork[::-1])
        assert _blob_keys(await saver.get_blobs([BlobRange(f, "x", 0, 9)])) == [(f, "x", 2), (f, "x", 3)]

    async def test_delete_keeps_lineage_through_a_deleted_intermediate_fork(self, saver: Saver) -> None:
        """A fork of a fork keeps its whole lineage when both ancestors are deleted, in either order."""
        for order in ("middle_first", "root_first"):
            run = new_id()
            root = await _chain(saver, _tid("root"), 3, run_id=run)
            mid = await _chain(saver, _tid("mid"), 3, run_id=run, fork_from=root[0])  # steps 1, 2, 3
            leaf = await _chain(saver, _tid("leaf"), 1, run_id=run, fork_from=mid[1])  # step 3, needs mid up to step 2
            first, second = (mid, root) if order == "middle_first" else (root, mid)
            await saver.delete_thread(first[0].thread_id)
            await saver.delete_thread(second[0].thread_id)
            for cp in (root[0], mid[0], mid[1], leaf[0]):
                _assert_stored(await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id), cp)
            for cp in (root[1], root[2], mid[2]):
                assert await saver.get_checkpoint(cp.thread_id, cp.checkpoint_id) is None, order
            ranges = [BlobRange(root[0].thread_id, "x", 0, 0), BlobRange(mid[0].thread_id, "x", 1, 2)]
            assert len(await saver.get_blobs(ranges)) == 3

    async def test_deleted_source_id_is_reusable_only_after_its_forks_are_deleted(self, saver: Saver) -> None:
        """While a fork needs a deleted thread's rows, its id cannot be created again; once the fork is deleted
        too, the id is free and the kept rows are gone."""
        run = new_id()
        src = await _chain(saver, _tid("src"), 2, run_id=run)
        fork = await _chain(saver, _tid("fork"), 1, run_id=run, fork_from=src[0])
        s = src[0].thread_id
        await saver.delete_thread(s)
        with pytest.raises(ThreadConflictError):
            await saver.commit(make_checkpoint(s, 0), expected_head=None, run_id=run)
        _assert_stored(await saver.get_checkpoint(s, src[0].checkpoint_id), src[0])
        await saver.delete_thread(fork[0].thread_id)
        assert await saver.get_checkpoint(s, src[0].checkpoint_id) is None
        [again] = await _chain(saver, s, 1, run_id=run)
        assert _ids(await saver.list_checkpoints(s)) == [again.checkpoint_id]

    # -- hostile values (issue 10) -----------------------------------------------------------------------------------

    async def test_filter_integers_compare_exactly_at_the_64_bit_edge(self, saver: Saver) -> None:
        """Integers next to each other beyond what a double tells apart are different numbers; an integer equals a
        float only when they are the same number."""
        edge = [-(2**63), -(2**63) - 1, 2**63 - 1, 2**63, 2**53 + 1, 2**53, 10**20, 1e20]
        cps = await self._filter_thread(saver, [{"v": v} for v in edge])
        for value in edge:
            expected = [cp.checkpoint_id for cp in reversed(cps) if metadata_matches(cp.metadata, {"v": value})]
            got = _ids(await saver.list_checkpoints(cps[0].thread_id, filter={"v": value}))
            assert got == expected, value
        assert len(_ids(await saver.list_checkpoints(cps[0].thread_id, filter={"v": -(2**63)}))) == 1
        assert len(_ids(await saver.list_checkpoints(cps[0].thread_id, filter={"v": 10**20}))) == 2  # 1e20 is 10**20

    async def test_filter_a_number_never_matches_a_string(self, saver: Saver) -> None:
        """``1`` is not ``"1"``, at the top level, inside objects and inside arrays, whichever side is stored."""
        a, b = await self._filter_thread(
            saver, [{"v": 1, "o": {"k": 1}, "l": [1]}, {"v": "1", "o": {"k": "1"}, "l": ["1"]}]
        )
        t = a.thread_id
        for key, number, text in (("v", 1, "1"), ("o", {"k": 1}, {"k": "1"}), ("l", [1], ["1"])):
            assert _ids(await saver.list_checkpoints(t, filter={key: number})) == [a.checkpoint_id], key
            assert _ids(await saver.list_checkpoints(t, filter={key: text})) == [b.checkpoint_id], key
            assert _ids(await saver.list_checkpoints(t, filter={key: 1.0 if key == "v" else number})) == [
                a.checkpoint_id
            ]

    async def test_filter_nan_or_infinity_matches_nothing(self, saver: Saver) -> None:
        """Stored metadata never holds NaN or an infinity, so a filter with one matches no checkpoint (no error)."""
        [a] = await self._filter_thread(saver, [{"v": 1.5, "source": "loop"}])
        for bad in (float("nan"), float("inf"), -float("inf"), [float("nan")], {"k": float("inf")}):
            assert await saver.list_checkpoints(a.thread_id, filter={"v": bad}) == []
            assert await saver.list_checkpoints(a.thread_id, filter={"source": "loop", "v": bad}) == []

    async def test_metadata_with_nan_or_infinity_is_refused_at_write_time(self, saver: Saver) -> None:
        """JSON has no NaN or infinity: a commit whose metadata holds one raises ``SerializationError``, writing
        nothing."""
        [head] = await _chain(saver, _tid("nan"), 1, run_id=(run := new_id()))
        for bad in (float("nan"), float("inf"), {"deep": [-float("inf")]}):
            rejected = make_checkpoint(head.thread_id, 1, parent=head, metadata={"v": bad})
            with pytest.raises(SerializationError, match="NaN or an infinity"):
                await saver.commit(rejected, expected_head=head.checkpoint_id, run_id=run)
            await _assert_unchanged(saver, head.thread_id, head, rejected)

    async def test_lone_surrogates_are_refused_at_write_time(self, saver: Saver) -> None:
        """Text with no UTF-8 form (a lone surrogate) in an id, a channel name, a metadata key or value, or a task
        id is refused with ``SerializationError`` naming it, before anything is written."""
        run = new_id()
        [head] = await _chain(saver, _tid("surrogate"), 1, run_id=run)
        t = head.thread_id
        bad = "x\ud800y"
        with pytest.raises(SerializationError, match=r"thread_id 'x.ud800y' holds a lone surrogate"):
            await saver.commit(make_checkpoint(bad, 0), expected_head=None, run_id=run)
        assert await saver.get_thread(t.replace("surrogate", "x")) is None
        rejected = [
            dataclasses.replace(make_checkpoint(t, 1, parent=head), checkpoint_id=bad),
            make_checkpoint(t, 1, parent=head, metadata={"k": bad}),
            make_checkpoint(t, 1, parent=head, metadata={bad: 1}),
            make_checkpoint(t, 1, parent=head, metadata={"k": [{"deep": bad}]}),
            make_checkpoint(t, 1, parent=head, channels={bad: b"x", "ok": b"y"}),  # two blobs at one step
        ]
        for cp in rejected:
            with pytest.raises(SerializationError, match="lone surrogate"):
                await saver.commit(cp, expected_head=head.checkpoint_id, run_id=run)
            await _assert_unchanged(saver, t, head, cp)
        with pytest.raises(SerializationError, match=r"task_id .* holds a lone surrogate"):
            await saver.put_writes(t, head.checkpoint_id, [StoredWrite(bad, "result", 0, b"r")], run_id=run)
        with pytest.raises(SerializationError, match=r"run_id"):
            await saver.claim(t, expected_head=head.checkpoint_id, expected_run_id=run, run_id=bad)
        assert await saver.get_writes(t, head.checkpoint_id) == []
        assert (await _row(saver, t)).run_id == run

    async def test_an_error_with_a_lone_surrogate_is_stored_escaped(self, saver: Saver) -> None:
        """A failed thread's ``error`` is stored whatever the exception said: a lone surrogate as its escape."""
        run = new_id()
        [head] = await _chain(saver, _tid("error"), 1, run_id=run)
        await saver.put_writes(head.thread_id, head.checkpoint_id, [], run_id=run, status="failed", error="bad \udc80")
        assert (await _row(saver, head.thread_id)).error == "bad \\udc80"

    async def test_errors_quote_long_ids_briefly(self, saver: Saver) -> None:
        """An error message quotes at most the first 80 characters of an id, however long the id."""
        huge = "t" * 1_000_000
        with pytest.raises(ThreadNotFoundError) as info:
            await saver.claim(huge, expected_head="h" * 100_000, expected_run_id="r", run_id="r")
        assert len(str(info.value)) < 300 and "t" * 80 + "…" in str(info.value)
        with pytest.raises(ThreadNotFoundError) as info:
            await saver.delete_thread(huge)
        assert len(str(info.value)) < 300
        run = new_id()
        [head] = await _chain(saver, _tid("brief"), 1, run_id=run)
        with pytest.raises(ThreadConflictError) as conflict:
            await saver.commit(
                make_checkpoint(head.thread_id, 1, parent=head), expected_head="e" * 100_000, run_id="r" * 100_000
            )
        assert len(str(conflict.value)) < 600
