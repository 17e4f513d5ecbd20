"""Opening, reading checkpoints and thread records."""

from __future__ import annotations

import dataclasses

from graphckpt.ids import new_id
from graphckpt.savers.base import (
    Saver,
    Status,
    StoredCheckpoint,
    ThreadRecord,
)
from graphckpt.testing._records import (
    assert_stored,
    checkpoint_ids,
    commit_chain,
    make_checkpoint,
    new_thread_id,
    thread_ids,
    thread_row,
    tick,
)


class ReadCases:
    """Cases of :class:`~graphckpt.testing.SaverConformance`; needs its ``saver`` fixture."""

    # -- lifecycle ---------------------------------------------------------------------------------------------------

    async def test_async_context_manager_returns_itself_and_reopens_lazily(self, saver: Saver) -> None:
        """``async with saver`` yields the saver and closes it on exit; a closed saver reopens on its next use
        and still holds what was committed."""
        run = new_id()
        [cp] = await commit_chain(saver, new_thread_id("cm"), 1, run_id=run)
        async with saver as entered:
            assert entered is saver
            assert_stored(await entered.get_checkpoint(cp.thread_id, cp.checkpoint_id), cp)
        assert_stored(await saver.get_checkpoint(cp.thread_id), cp)
        await saver.aclose()
        await saver.aclose()  # idempotent
        assert_stored(await saver.get_checkpoint(cp.thread_id), cp)

    async def test_setup_is_idempotent_and_keeps_data(self, saver: Saver) -> None:
        """``setup()`` may run any number of times; it never drops stored rows."""
        run = new_id()
        [cp] = await commit_chain(saver, new_thread_id("setup"), 1, run_id=run)
        await saver.setup()
        await saver.setup()
        assert_stored(await saver.get_checkpoint(cp.thread_id), cp)
        more = make_checkpoint(cp.thread_id, 1, parent=cp)
        await saver.commit(more, expected_head=cp.checkpoint_id, run_id=run)
        assert checkpoint_ids(await saver.list_checkpoints(cp.thread_id)) == [more.checkpoint_id, cp.checkpoint_id]

    async def test_setup_without_create_opens_the_existing_store(self, saver: Saver) -> None:
        """``setup(create=False)`` on a store that is set up opens it as ``setup()`` does, with its data."""
        run = new_id()
        [cp] = await commit_chain(saver, new_thread_id("nocreate"), 1, run_id=run)
        await saver.aclose()
        await saver.setup(create=False)
        await saver.setup(create=False)
        assert_stored(await saver.get_checkpoint(cp.thread_id), cp)
        more = make_checkpoint(cp.thread_id, 1, parent=cp)
        await saver.commit(more, expected_head=cp.checkpoint_id, run_id=run)

    # -- reading checkpoints -----------------------------------------------------------------------------------------

    async def test_get_checkpoint_by_id_returns_what_was_committed(self, saver: Saver) -> None:
        """Every field comes back as committed: ids, parent, step, time, status, metadata (nested JSON), bytes."""
        t = new_thread_id("get")
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
        assert_stored(await saver.get_checkpoint(t, first.checkpoint_id), first)

    async def test_get_checkpoint_by_step_and_head(self, saver: Saver) -> None:
        """``step=`` finds the checkpoint at that step; no id and no step gives the head."""
        cps = await commit_chain(saver, new_thread_id("step"), 3, run_id=new_id())
        t = cps[0].thread_id
        for cp in cps:
            assert_stored(await saver.get_checkpoint(t, step=cp.step), cp)
        assert_stored(await saver.get_checkpoint(t), cps[-1])
        assert_stored(await saver.get_checkpoint(t, None), cps[-1])

    async def test_get_checkpoint_unknown_returns_none(self, saver: Saver) -> None:
        """Unknown thread, unknown id, unknown step, or an id stored under another thread: ``None``."""
        [a] = await commit_chain(saver, new_thread_id("a"), 1, run_id=new_id())
        [b] = await commit_chain(saver, new_thread_id("b"), 1, run_id=new_id())
        assert await saver.get_checkpoint(new_thread_id("nope")) is None
        assert await saver.get_checkpoint(new_thread_id("nope"), a.checkpoint_id) is None
        assert await saver.get_checkpoint(a.thread_id, new_id()) is None
        assert await saver.get_checkpoint(a.thread_id, step=7) is None
        assert await saver.get_checkpoint(a.thread_id, b.checkpoint_id) is None

    async def test_list_checkpoints_newest_first(self, saver: Saver) -> None:
        """All checkpoints of the thread, highest step first, each as committed; an unknown thread lists nothing."""
        cps = await commit_chain(saver, new_thread_id("list"), 4, run_id=new_id())
        listed = await saver.list_checkpoints(cps[0].thread_id)
        assert checkpoint_ids(listed) == checkpoint_ids(cps[::-1])
        for got, expected in zip(listed, cps[::-1], strict=True):
            assert_stored(got, expected)
        assert await saver.list_checkpoints(new_thread_id("nope")) == []

    async def test_list_checkpoints_limit(self, saver: Saver) -> None:
        """``limit`` keeps the newest ``limit`` checkpoints; 0 gives none; more than exist gives all."""
        cps = await commit_chain(saver, new_thread_id("limit"), 4, run_id=new_id())
        t = cps[0].thread_id
        assert checkpoint_ids(await saver.list_checkpoints(t, limit=2)) == checkpoint_ids([cps[3], cps[2]])
        assert await saver.list_checkpoints(t, limit=0) == []
        assert checkpoint_ids(await saver.list_checkpoints(t, limit=10)) == checkpoint_ids(cps[::-1])

    async def test_list_checkpoints_before_step(self, saver: Saver) -> None:
        """``before_step`` is strict (``step < before_step``) and combines with ``limit`` (paging)."""
        cps = await commit_chain(saver, new_thread_id("before"), 5, run_id=new_id())
        t = cps[0].thread_id
        assert checkpoint_ids(await saver.list_checkpoints(t, before_step=3)) == checkpoint_ids(
            [cps[2], cps[1], cps[0]]
        )
        assert checkpoint_ids(await saver.list_checkpoints(t, before_step=3, limit=1)) == [cps[2].checkpoint_id]
        assert await saver.list_checkpoints(t, before_step=0) == []

    async def test_checkpoint_ids_sort_by_creation_time(self, saver: Saver) -> None:
        """Ids made later sort later, and the saver's newest-first order is the reverse of id order."""
        cps = await commit_chain(saver, new_thread_id("ids"), 5, run_id=new_id())
        made = checkpoint_ids(cps)
        assert sorted(made) == made
        listed = checkpoint_ids(await saver.list_checkpoints(cps[0].thread_id))
        assert listed == sorted(made, reverse=True)

    # -- threads -----------------------------------------------------------------------------------------------------

    async def test_thread_record_follows_the_head(self, saver: Saver) -> None:
        """The thread row takes each new head's id, step, status and metadata; ``created_at`` stays,
        ``updated_at`` moves forward."""
        run = new_id()
        t = new_thread_id("head")
        a = make_checkpoint(t, 0, metadata={"source": "input"})
        await saver.commit(a, expected_head=None, run_id=run)
        first = await thread_row(saver, t)
        times = (first.created_at, first.updated_at)
        assert first == ThreadRecord(
            t, a.checkpoint_id, 0, "running", run, *times, metadata={"source": "input"}, epoch=1
        )
        assert first.created_at <= first.updated_at
        await tick()
        b = make_checkpoint(t, 1, parent=a, status="interrupted", metadata={"source": "loop", "n": 1})
        await saver.commit(b, expected_head=a.checkpoint_id, run_id=run)
        second = await thread_row(saver, t)
        assert second == dataclasses.replace(
            first,
            head_checkpoint_id=b.checkpoint_id,
            head_step=1,
            status="interrupted",
            metadata={"source": "loop", "n": 1},
            updated_at=second.updated_at,
        )
        assert second.updated_at > first.updated_at

    async def test_get_thread_of_an_unknown_thread_is_none(self, saver: Saver) -> None:
        assert await saver.get_thread(new_thread_id("nope")) is None

    async def test_list_threads_most_recently_updated_first(self, saver: Saver) -> None:
        """``list_threads`` orders by ``updated_at``, newest first; a commit moves a thread to the front."""
        run = new_id()
        mine: list[str] = []
        heads: dict[str, StoredCheckpoint] = {}
        for name in ("a", "b", "c"):
            [heads[name]] = await commit_chain(saver, new_thread_id(name), 1, run_id=run)
            mine.append(heads[name].thread_id)
            await tick()
        a, b, c = mine
        assert thread_ids(await saver.list_threads(), mine) == [c, b, a]
        await saver.commit(make_checkpoint(a, 1, parent=heads["a"]), expected_head=heads["a"].checkpoint_id, run_id=run)
        records = await saver.list_threads()
        assert thread_ids(records, mine) == [a, c, b]
        assert [r.updated_at for r in records] == sorted((r.updated_at for r in records), reverse=True)

    async def test_list_threads_filters_by_status(self, saver: Saver) -> None:
        """``status=`` keeps only threads whose row has that status, including a status set by ``put_writes``."""
        run = new_id()
        done, failed, running = new_thread_id("done"), new_thread_id("failed"), new_thread_id("running")
        await saver.commit(make_checkpoint(done, 0, status="done"), expected_head=None, run_id=run)
        [f] = await commit_chain(saver, failed, 1, run_id=run)
        await saver.put_writes(failed, f.checkpoint_id, [], run_id=run, status="failed", error="boom")
        await commit_chain(saver, running, 1, run_id=run)
        mine = [done, failed, running]
        assert sorted(thread_ids(await saver.list_threads(), mine)) == sorted(mine)
        cases: list[tuple[Status, list[str]]] = [("done", [done]), ("failed", [failed]), ("running", [running])]
        for status, expected in [*cases, ("interrupted", [])]:
            records = await saver.list_threads(status=status)
            assert thread_ids(records, mine) == expected
            assert all(r.status == status for r in records)
