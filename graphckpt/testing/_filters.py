"""Metadata filters of ``list_checkpoints``: JSON equality, key by key."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from graphckpt.errors import InvalidArgumentError
from graphckpt.ids import new_id
from graphckpt.savers.base import (
    BlobRange,
    Saver,
    metadata_matches,
)
from graphckpt.testing._records import (
    HOSTILE_KEY,
    HOSTILE_VALUE,
    assert_stored,
    blob_keys,
    checkpoint_ids,
    filter_thread,
    make_checkpoint,
    new_thread_id,
    thread_ids,
)


class FilterCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    # -- metadata filters --------------------------------------------------------------------------------------------

    async def test_filter_equality_on_a_top_level_key(self, saver: Saver) -> None:
        """A filter key matches checkpoints whose metadata has that key with an equal value; others are left out."""
        a, b, c = await filter_thread(saver, [{"source": "input"}, {"source": "loop"}, {"source": "loop"}])
        t = a.thread_id
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"source": "loop"})) == checkpoint_ids([c, b])
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"source": "input"})) == [a.checkpoint_id]
        assert await saver.list_checkpoints(t, filter={"source": "fork"}) == []
        assert await saver.list_checkpoints(t, filter={"missing": "loop"}) == []
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={})) == checkpoint_ids([c, b, a])

    async def test_filter_multiple_keys_must_all_match(self, saver: Saver) -> None:
        """Every key of the filter must match; filters combine with ``limit`` and ``before_step``."""
        a, b, c, d = await filter_thread(
            saver,
            [
                {"source": "loop", "node": "x"},
                {"source": "loop", "node": "y"},
                {"source": "update", "node": "x"},
                {"source": "loop", "node": "x", "extra": 1},
            ],
        )
        t = a.thread_id
        assert checkpoint_ids(
            await saver.list_checkpoints(t, filter={"source": "loop", "node": "x"})
        ) == checkpoint_ids([d, a])
        assert checkpoint_ids(
            await saver.list_checkpoints(t, filter={"source": "loop", "node": "x"}, limit=2)
        ) == checkpoint_ids([d, a])
        got = await saver.list_checkpoints(t, filter={"source": "loop"}, before_step=3)
        assert checkpoint_ids(got) == checkpoint_ids([b, a])
        assert c.checkpoint_id not in checkpoint_ids(
            await saver.list_checkpoints(t, filter={"node": "x", "source": "loop"})
        )

    async def test_filter_non_string_values_use_json_equality(self, saver: Saver) -> None:
        """Ints, bools, null, lists and nested objects compare as JSON values: ``true`` is not ``1``, a nested
        object must be equal (not merely contain the filter; key order does not matter), ``null`` matches only a
        key that is present with ``null``."""
        a, b, c = await filter_thread(
            saver,
            [
                {"n": 1, "flag": True, "usage": {"in": 5, "out": 7}, "tags": ["x", "y"], "gone": None},
                {"n": 2, "flag": False, "usage": {"in": 5}, "tags": ["x"]},
                {"n": True, "flag": 1, "usage": {"out": 7, "in": 5}, "tags": ["y", "x"]},
            ],
        )
        t = a.thread_id

        async def match(flt: dict[str, Any]) -> list[str]:
            return checkpoint_ids(await saver.list_checkpoints(t, filter=flt))

        assert await match({"n": 1}) == [a.checkpoint_id]
        assert await match({"n": 2, "flag": False}) == [b.checkpoint_id]
        assert await match({"flag": True}) == [a.checkpoint_id]
        assert await match({"n": True}) == [c.checkpoint_id]
        assert await match({"n": "1"}) == []
        assert await match({"usage": {"in": 5, "out": 7}}) == checkpoint_ids([c, a])
        assert await match({"usage": {"in": 5}}) == [b.checkpoint_id]
        assert await match({"tags": ["x"]}) == [b.checkpoint_id]
        assert await match({"tags": ["x", "y"]}) == [a.checkpoint_id]
        assert await match({"gone": None}) == [a.checkpoint_id]

    async def test_filter_numbers_compare_by_value_at_any_depth(self, saver: Saver) -> None:
        """``1`` equals ``1.0`` at the top level and inside objects and arrays (JSON numbers), but not ``true``."""
        a, b = await filter_thread(
            saver, [{"w": 1.0, "tags": {"w": 1.0, "l": [2.0, 0.5]}}, {"w": True, "tags": {"w": True, "l": [2, 0.5]}}]
        )
        t = a.thread_id
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"w": 1})) == [a.checkpoint_id]
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"tags": {"w": 1, "l": [2, 0.5]}})) == [
            a.checkpoint_id
        ]
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"tags": {"w": True, "l": [2.0, 0.5]}})) == [
            b.checkpoint_id
        ]

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
        cps = await filter_thread(saver, metas)
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
            assert checkpoint_ids(await saver.list_checkpoints(t, filter=flt)) == expected, flt
        assert [dict(cp.metadata) for cp in await saver.list_checkpoints(t)] == metas[::-1]

    async def test_filter_keys_are_top_level_names_not_paths(self, saver: Saver) -> None:
        """A key such as ``usage.in`` or ``$.source`` names a top-level key literally; it is never a JSON path."""
        a, b = await filter_thread(saver, [{"usage": {"in": 5}, "source": "x"}, {"usage.in": 5, "$.source": "x"}])
        t = a.thread_id
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"usage.in": 5})) == [b.checkpoint_id]
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"$.source": "x"})) == [b.checkpoint_id]
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"source": "x"})) == [a.checkpoint_id]

    async def test_filter_hostile_keys_and_values_are_only_data(self, saver: Saver) -> None:
        """SQL in filter keys, values and thread ids is matched as text: no extra match, no damage, and a
        checkpoint that stores those very strings is found by them."""
        t = new_thread_id("x'; DROP TABLE threads; --")
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
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={HOSTILE_KEY: HOSTILE_VALUE})) == [b.checkpoint_id]
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={'k"]': "v'"})) == [b.checkpoint_id]
        # every table is intact and still writable
        assert_stored(await saver.get_checkpoint(t, b.checkpoint_id), b)
        assert checkpoint_ids(await saver.list_checkpoints(t)) == checkpoint_ids([b, a])
        assert t in thread_ids(await saver.list_threads(), [t])
        assert blob_keys(await saver.get_blobs([BlobRange(t, "x", 0, 9)])) == [(t, "x", 0)]
        c = make_checkpoint(t, 2, parent=b)
        await saver.commit(c, expected_head=b.checkpoint_id, run_id=run)
        assert_stored(await saver.get_checkpoint(t), c)

    async def test_filter_that_is_not_json_is_refused_naming_its_key(self, saver: Saver) -> None:
        """A filter value that is no JSON value (a ``datetime``, a ``set``, bytes, NaN, an infinity, text with a
        lone surrogate, an object with a key that is not text), or a filter key that is not text (``{1: 1}``), is
        :class:`~graphckpt.errors.InvalidArgumentError` naming the key, before any query; the saver keeps working."""
        [a] = await filter_thread(saver, [{"v": 1, "1": 1, "when": "2026-01-01T00:00:00"}])
        t = a.thread_id
        bad: list[tuple[dict[Any, Any], str]] = [
            ({"when": datetime.datetime(2026, 1, 1)}, "'when'.*datetime"),
            ({"v": {1, 2}}, "'v'.*set"),
            ({"v": b"1"}, "'v'.*bytes"),
            ({"v": float("nan")}, "'v'.*nan"),
            ({"v": float("inf")}, "'v'.*inf"),
            ({"v": [1, -float("inf")]}, "'v'.*inf"),
            ({"v": "x\ud800"}, "'v'.*lone surrogate"),
            ({"x\udc80": 1}, "x.*udc80.*lone surrogate"),
            ({"v": {"k": {1: 1}}}, "'v'.*key 1 .*int"),
            ({1: 1}, "key 1: keys are text.*int"),
            ({None: 1}, "key None"),
            ({"source": "loop", "v": object()}, "'v'.*object"),
        ]
        for flt, message in bad:
            with pytest.raises(InvalidArgumentError, match=message):
                await saver.list_checkpoints(t, filter=flt)
            with pytest.raises(InvalidArgumentError):  # a thread that does not exist: the same answer
                await saver.list_checkpoints(t + "-none", filter=flt)
        deep: Any = 1
        for _ in range(5000):
            deep = [deep]
        with pytest.raises(InvalidArgumentError, match=r"'v'.*deeper than"):
            await saver.list_checkpoints(t, filter={"v": deep})
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"1": 1})) == [a.checkpoint_id]
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={"v": (1.0)})) == [a.checkpoint_id]

    async def test_filter_big_integers_under_keys_holding_quotes(self, saver: Saver) -> None:
        """Integers past 64 bits, and floats near them, under keys holding quotes, backslashes, dots or NUL (at
        the top level and inside objects and arrays) match exactly as
        :func:`~graphckpt.savers.base.metadata_matches` says: every key and value pair probed."""
        keys = ['k"', '"', 'a"b.c', 'q\\"', "\\", 'n\x00"', '"\uffff"', "plain", "a.b"]
        numbers: list[Any] = [10**30, 10**30 + 1, -(10**40), 2**64, 2**63, 1.5e30, 7, "7", {'i"': 10**30}, [10**30]]
        metas = [{key: numbers[(i + j) % len(numbers)] for j, key in enumerate(keys)} for i in range(len(numbers))]
        cps = await filter_thread(saver, metas)
        t = cps[0].thread_id
        for key in keys:
            for value in [*numbers, {'i"': 10**30 + 1}, [10**30 - 1], 1.5e30 + 2**60]:
                flt = {key: value}
                expected = [
                    cps[i].checkpoint_id for i in reversed(range(len(metas))) if metadata_matches(metas[i], flt)
                ]
                assert checkpoint_ids(await saver.list_checkpoints(t, filter=flt)) == expected, flt
        assert checkpoint_ids(await saver.list_checkpoints(t, filter={'k"': 10**30})) == [cps[0].checkpoint_id]
