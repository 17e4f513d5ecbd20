"""Hostile values: numbers at the edges, NaN, lone surrogates, long ids."""

from __future__ import annotations

import dataclasses

import pytest

from graphckpt.errors import InvalidArgumentError, SerializationError, ThreadConflictError, ThreadNotFoundError
from graphckpt.ids import new_id
from graphckpt.savers.base import (
    MAX_ID_BYTES,
    Saver,
    StoredWrite,
    metadata_matches,
)
from graphckpt.testing._records import (
    assert_unchanged,
    checkpoint_ids,
    commit_chain,
    filter_thread,
    make_checkpoint,
    new_thread_id,
    thread_row,
)


class HostileValueCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    # -- hostile values -----------------------------------------------------------------------------------

    async def test_filter_integers_compare_exactly_at_the_64_bit_edge(self, saver: Saver) -> None:
        """Integers next to each other beyond what a double tells apart are different numbers; an integer equals a
        float only when they are the same number."""
        edge = [-(2**63), -(2**63) - 1, 2**63 - 1, 2**63, 2**53 + 1, 2**53, 10**20, 1e20]
        cps = await filter_thread(saver, [{"v": v} for v in edge])
        for value in edge:
            expected = [cp.checkpoint_id for cp in reversed(cps) if metadata_matches(cp.metadata, {"v": value})]
            got = checkpoint_ids(await saver.list_checkpoints(cps[0].thread_id, filter={"v": value}))
            assert got == expected, value
        assert len(checkpoint_ids(await saver.list_checkpoints(cps[0].thread_id, filter={"v": -(2**63)}))) == 1
        assert (
            len(checkpoint_ids(await saver.list_checkpoints(cps[0].thread_id, filter={"v": 10**20}))) == 2
        )  # 1e20 is 10**20

    async def test_filter_a_number_never_matches_a_string(self, saver: Saver) -> None:
        """``1`` is not ``"1"``, at the top level, inside objects and inside arrays, whichever side is stored."""
        a, b = await filter_thread(saver, [{"v": 1, "o": {"k": 1}, "l": [1]}, {"v": "1", "o": {"k": "1"}, "l": ["1"]}])
        t = a.thread_id
        for key, number, text in (("v", 1, "1"), ("o", {"k": 1}, {"k": "1"}), ("l", [1], ["1"])):
            assert checkpoint_ids(await saver.list_checkpoints(t, filter={key: number})) == [a.checkpoint_id], key
            assert checkpoint_ids(await saver.list_checkpoints(t, filter={key: text})) == [b.checkpoint_id], key
            assert checkpoint_ids(await saver.list_checkpoints(t, filter={key: 1.0 if key == "v" else number})) == [
                a.checkpoint_id
            ]

    async def test_metadata_with_nan_or_infinity_is_refused_at_write_time(self, saver: Saver) -> None:
        """JSON has no NaN or infinity: a commit whose metadata holds one raises ``SerializationError``, writing
        nothing."""
        [head] = await commit_chain(saver, new_thread_id("nan"), 1, run_id=(run := new_id()))
        for bad in (float("nan"), float("inf"), {"deep": [-float("inf")]}):
            rejected = make_checkpoint(head.thread_id, 1, parent=head, metadata={"v": bad})
            with pytest.raises(SerializationError, match="NaN or an infinity"):
                await saver.commit(rejected, expected_head=head.checkpoint_id, run_id=run)
            await assert_unchanged(saver, head.thread_id, head, rejected)

    async def test_lone_surrogates_are_refused_at_write_time(self, saver: Saver) -> None:
        """Text with no UTF-8 form (a lone surrogate) in an id, a channel name, a metadata key or value, or a task
        id is refused with ``SerializationError`` naming it, before anything is written."""
        run = new_id()
        [head] = await commit_chain(saver, new_thread_id("surrogate"), 1, run_id=run)
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
            await assert_unchanged(saver, t, head, cp)
        with pytest.raises(SerializationError, match=r"task_id .* holds a lone surrogate"):
            await saver.put_writes(t, head.checkpoint_id, [StoredWrite(bad, "result", 0, b"r")], run_id=run)
        with pytest.raises(SerializationError, match=r"run_id"):
            await saver.claim(t, expected_head=head.checkpoint_id, expected_run_id=run, run_id=bad)
        assert await saver.get_writes(t, head.checkpoint_id) == []
        assert (await thread_row(saver, t)).run_id == run

    async def test_an_error_with_a_lone_surrogate_is_stored_escaped(self, saver: Saver) -> None:
        """A failed thread's ``error`` is stored whatever the exception said: a lone surrogate as its escape."""
        run = new_id()
        [head] = await commit_chain(saver, new_thread_id("error"), 1, run_id=run)
        await saver.put_writes(head.thread_id, head.checkpoint_id, [], run_id=run, status="failed", error="bad \udc80")
        assert (await thread_row(saver, head.thread_id)).error == "bad \\udc80"

    async def test_errors_quote_long_ids_briefly(self, saver: Saver) -> None:
        """An error message quotes at most the first 80 characters of an id, however long the id."""
        huge = "t" * 1_000_000
        with pytest.raises(InvalidArgumentError) as refused:
            await saver.claim(huge, expected_head="h" * 100_000, expected_run_id="r", run_id="r")
        assert len(str(refused.value)) < 300 and "t" * 80 + "…" in str(refused.value)
        with pytest.raises(ThreadNotFoundError) as info:
            await saver.claim("t" * 1000, expected_head="h" * 100_000, expected_run_id="r", run_id="r")
        assert len(str(info.value)) < 300 and "t" * 80 + "…" in str(info.value)
        assert await saver.get_thread(huge) is None  # a read finds nothing: no stored id is that long
        run = new_id()
        [head] = await commit_chain(saver, new_thread_id("brief"), 1, run_id=run)
        with pytest.raises(ThreadConflictError) as conflict:
            await saver.commit(
                make_checkpoint(head.thread_id, 1, parent=head), expected_head="e" * 100_000, run_id="r" * 1000
            )
        assert len(str(conflict.value)) < 600

    async def test_ids_past_the_limit_are_refused_before_the_store(self, saver: Saver) -> None:
        """A thread, checkpoint, run or task id longer than ``MAX_ID_BYTES`` (1,024 bytes of UTF-8, so 513 ``é``)
        is refused with ``InvalidArgumentError`` naming the id and the limit, writing nothing; 1,024 bytes are
        stored and read back."""
        assert MAX_ID_BYTES == 1024
        long, fits = "é" * 513, "é" * 512  # 1,026 and 1,024 bytes
        run = new_id()
        for bad in (long, "x" * 1_000_000):
            with pytest.raises(
                InvalidArgumentError, match=r"thread_id '[éx]+…' is [0-9,]+ bytes long .*at most 1,024 bytes"
            ):
                await saver.commit(make_checkpoint(bad, 0), expected_head=None, run_id=run)
            assert await saver.get_thread(bad) is None
        [head] = await commit_chain(saver, fits, 1, run_id=run)
        assert (await thread_row(saver, fits)).thread_id == fits
        for cp, what in (
            (dataclasses.replace(make_checkpoint(fits, 1, parent=head), checkpoint_id=long), "checkpoint_id"),
            (make_checkpoint(fits, 1, parent=head), "run_id"),
        ):
            with pytest.raises(InvalidArgumentError, match=f"{what} .*at most 1,024 bytes"):
                await saver.commit(cp, expected_head=head.checkpoint_id, run_id=long if what == "run_id" else run)
            await assert_unchanged(saver, fits, head, cp)
        with pytest.raises(InvalidArgumentError, match=r"task_id .*at most 1,024 bytes"):
            await saver.put_writes(fits, head.checkpoint_id, [StoredWrite(long, "result", 0, b"r")], run_id=run)
        with pytest.raises(InvalidArgumentError, match=r"run_id .*at most 1,024 bytes"):
            await saver.claim(fits, expected_head=head.checkpoint_id, expected_run_id=run, run_id=long)
        assert await saver.get_writes(fits, head.checkpoint_id) == []
        assert (await thread_row(saver, fits)).run_id == run
