"""Export a thread with its lineage as JSON lines and import it into another saver, where it resumes."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphckpt import (
    END,
    START,
    CorruptCheckpointError,
    GraphckptError,
    NodeError,
    Saver,
    StateGraph,
    ThreadConflictError,
    ThreadStateError,
    append,
)
from graphckpt.savers.memory import MemorySaver
from graphckpt.transfer import export_thread, import_thread


class S(BaseModel):
    log: Annotated[list[str], append] = []
    n: int = 0


FAIL = {"on": True}


def app_for(saver: Saver) -> Any:
    def step(s: S) -> dict[str, Any]:
        if s.n == 3 and FAIL["on"]:
            raise RuntimeError("crash at 3")
        return {"log": [f"s{s.n}"], "n": s.n + 1}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 5 else END)
    return g.compile(saver=saver)


async def dump(saver: Saver, thread_id: str) -> list[str]:
    return [line async for line in export_thread(saver, thread_id)]


async def test_fork_with_lineage_moves_between_savers_and_resumes(saver: Saver) -> None:
    source = MemorySaver()
    src = app_for(source)
    FAIL["on"] = False
    await src.ainvoke({}, thread_id="main")
    mid = (await src.ahistory("main"))[3]
    await src.afork("main", mid.checkpoint_id, update={"log": ["forked"]}, new_thread_id="alt")
    lines = await dump(source, "alt")
    assert json.loads(lines[0])["format"] == "graphckpt-thread"

    assert await import_thread(saver, lines) == "alt"
    dst = app_for(saver)
    want = [(h.thread_id, h.checkpoint_id, h.values) for h in await src.ahistory("alt")]
    got = [(h.thread_id, h.checkpoint_id, h.values) for h in await dst.ahistory("alt")]
    assert got == want
    done = await dst.aresume("alt")
    assert done.values.log == ["s0", "s1", "forked", "s2", "s3", "s4"]
    assert await import_thread(saver, await dump(source, "main")) == "main"  # the shared ancestors are skipped
    assert (await dst.aget_state("main")).values == (await src.aget_state("main")).values


async def test_failed_thread_keeps_status_and_pending_writes(saver: Saver) -> None:
    source = MemorySaver()
    FAIL["on"] = True
    with pytest.raises(NodeError):
        await app_for(source).ainvoke({}, thread_id="f")
    await import_thread(saver, await dump(source, "f"))
    dst = app_for(saver)
    snap = await dst.aget_state("f")
    assert snap.status == "failed" and snap.errors[0].message == "crash at 3"
    FAIL["on"] = False
    assert (await dst.aresume("f")).values.n == 5


async def test_bad_input_is_refused_and_changes_nothing(saver: Saver) -> None:
    source = MemorySaver()
    FAIL["on"] = False
    await app_for(source).ainvoke({}, thread_id="t")
    lines = await dump(source, "t")
    with pytest.raises(CorruptCheckpointError, match="bad header"):
        await import_thread(saver, ['{"kind": "checkpoint"}'])
    with pytest.raises(CorruptCheckpointError, match="line 2 is not a graphckpt record"):
        await import_thread(saver, [lines[0], "{not json"])
    with pytest.raises(CorruptCheckpointError, match="truncated"):
        await import_thread(saver, lines[:-1])
    assert await saver.get_thread("t") is None  # checked before anything is written
    assert await import_thread(saver, lines) == "t"
    assert (await app_for(saver).aget_state("t")).values.n == 5


def tamper(lines: list[str], index: int, **changes: Any) -> list[str]:
    item = json.loads(lines[index])
    item.update(changes)
    return [*lines[:index], json.dumps(item), *lines[index + 1 :]]


async def test_tampered_exports_are_refused_before_anything_is_written(saver: Saver) -> None:
    source = MemorySaver()
    FAIL["on"] = False
    await app_for(source).ainvoke({}, thread_id="t")
    lines = await dump(source, "t")  # header, 6 checkpoints, writes, end
    bad = {
        "wrong step": (tamper(lines, 3, step=7), "does not follow"),
        "missing parent": (
            [lines[0], *lines[2:-1], json.dumps({"kind": "end", "checkpoints": 5})],
            "neither the export",
        ),
        "bad base64": (tamper(lines, 2, body="!!!"), "wrong shape"),
        "bogus status": (tamper(lines, 7, status="bogus"), "unknown status"),
        "wrong count": (tamper(lines, 8, checkpoints=2), "the file holds 6"),
        "hidden header": (["", tamper(lines, 0, version=99)[0], *lines[1:]], "format version 99"),
    }
    for name, (changed, message) in bad.items():
        with pytest.raises(CorruptCheckpointError, match=message):
            await import_thread(saver, changed)
        assert await saver.get_thread("t") is None, name


async def test_an_existing_thread_never_takes_the_exports_status_or_writes(saver: Saver) -> None:
    source = MemorySaver()
    FAIL["on"] = True
    with pytest.raises(NodeError):
        await app_for(source).ainvoke({}, thread_id="f")
    lines = await dump(source, "f")
    plain = [line for line in lines if json.loads(line)["kind"] != "writes"]  # as if the status line was lost
    await import_thread(saver, plain)
    before = await saver.get_thread("f")
    assert before is not None and before.status != "failed"
    with pytest.raises(ThreadConflictError, match=r"'f' exists in the target .* another status or other pending"):
        await import_thread(saver, lines)  # the same checkpoints, but the file's status and writes differ
    after = await saver.get_thread("f")
    assert after == before and await saver.get_writes("f", before.head_checkpoint_id) == []
    assert await import_thread(saver, plain) == "f"  # identical: nothing to do, nothing changes
    assert await saver.get_thread("f") == before
    await saver.delete_thread("f")  # replacing it is explicit
    await import_thread(saver, lines)
    snap = await app_for(saver).aget_state("f")
    assert snap.status == "failed" and snap.errors[0].message == "crash at 3"


async def test_a_conflict_found_late_in_the_lineage_writes_nothing(saver: Saver) -> None:
    source = MemorySaver()
    FAIL["on"] = False
    src = app_for(source)
    await src.ainvoke({}, thread_id="main")
    mid = (await src.ahistory("main"))[3]
    await src.afork("main", mid.checkpoint_id, new_thread_id="alt")
    lines = await dump(source, "alt")  # main's first steps, then alt's
    await app_for(saver).ainvoke({"n": 4}, thread_id="alt")  # another thread of the same id in the target
    with pytest.raises(ThreadConflictError, match="'alt' exists in the target"):
        await import_thread(saver, lines)
    assert await saver.get_thread("main") is None  # the ancestors were not written before the conflict showed
    assert len(await saver.list_checkpoints("alt")) == 2


async def test_an_export_of_another_format_version_says_so(saver: Saver) -> None:
    source = MemorySaver()
    FAIL["on"] = False
    await app_for(source).ainvoke({}, thread_id="t")
    lines = await dump(source, "t")
    with pytest.raises(
        CorruptCheckpointError, match=r"format version 2; this graphckpt reads version 1 .*newer graphckpt: upgrade"
    ):
        await import_thread(saver, tamper(lines, 0, version=2))
    for version in (True, "1", 1.0):  # not the integer 1
        with pytest.raises(CorruptCheckpointError, match="format version"):
            await import_thread(saver, tamper(lines, 0, version=version))
    assert await saver.get_thread("t") is None


async def test_imported_ancestor_is_partial_and_nothing_resumes_it(saver: Saver) -> None:
    """An ancestor imported only up to a fork point is ``partial``: not in the ``running`` list a recovery reads,
    refused by resume, new input and update_state; forking from it works, and importing the thread itself later
    gives it its real status."""
    source = MemorySaver()
    src = app_for(source)
    FAIL["on"] = False
    await src.ainvoke({}, thread_id="main")
    mid = (await src.ahistory("main"))[3]
    await src.afork("main", mid.checkpoint_id, update={"log": ["forked"]}, new_thread_id="alt")
    lines = await dump(source, "alt")
    assert [json.loads(x)["status"] for x in lines if json.loads(x)["kind"] == "writes"] == ["partial", "running"]
    await import_thread(saver, lines)
    dst = app_for(saver)

    assert (await dst.aget_state("main")).status == "partial"
    assert [t.thread_id for t in await dst.athreads(status="running")] == ["alt"]
    assert [t.thread_id for t in await dst.athreads(status="partial")] == ["main"]
    for attempt in (dst.aresume("main"), dst.ainvoke({}, thread_id="main"), dst.aupdate_state("main", {"n": 9})):
        with pytest.raises(ThreadStateError, match=r"thread 'main' is partial: an import brought it only up to"):
            await attempt
    assert (await dst.aget_state("main")).status == "partial"  # the refusals changed nothing
    branch = await dst.afork("main", mid.checkpoint_id, new_thread_id="alt2")
    assert branch.status == "running" and (await dst.aresume("alt2")).values.n == 5

    await import_thread(saver, await dump(source, "main"))  # the thread itself: its real status replaces partial
    assert (await dst.aget_state("main")).status == "done"


async def test_ancestor_of_a_fork_at_its_head_is_completed_by_a_later_import(saver: Saver) -> None:
    source = MemorySaver()
    src = app_for(source)
    FAIL["on"] = False
    done = await src.ainvoke({}, thread_id="main")
    head = (await src.aget_state("main")).checkpoint_id
    await src.afork("main", head, update={"n": 0}, new_thread_id="again")
    await import_thread(saver, await dump(source, "again"))
    dst = app_for(saver)
    assert (await dst.aget_state("main")).status == "partial"
    await import_thread(saver, await dump(source, "main"))  # same checkpoints: only the status and writes differ
    snap = await dst.aget_state("main")
    assert snap.status == "done" and snap.values == done.values
    await import_thread(saver, await dump(source, "again"))  # importing the fork again changes nothing
    assert (await dst.aget_state("main")).status == "done"


async def test_old_exports_that_called_ancestors_running_import_them_as_partial(saver: Saver) -> None:
    source = MemorySaver()
    src = app_for(source)
    FAIL["on"] = False
    await src.ainvoke({}, thread_id="main")
    mid = (await src.ahistory("main"))[2]
    await src.afork("main", mid.checkpoint_id, new_thread_id="alt")
    lines = []
    for line in await dump(source, "alt"):
        item = json.loads(line)
        if item["kind"] == "writes" and item["thread_id"] == "main":
            item["status"] = "running"  # what exports written before the partial status said
        lines.append(json.dumps(item))
    await import_thread(saver, lines)
    assert (await app_for(saver).aget_state("main")).status == "partial"


def _prefix(old: str, new: str) -> Any:
    """A rename from one namespace prefix to another (what a server does on export and import)."""

    def rename(thread_id: str) -> str:
        if not thread_id.startswith(old):
            raise ValueError(f"thread {thread_id!r} is not under {old!r}")
        return new + thread_id[len(old) :]

    return rename


async def test_renamed_on_export_and_import_every_thread_id_moves(saver: Saver) -> None:
    """``rename`` renames every id a file holds (header, checkpoints, parents, body lineages, metadata links, writes
    lines): a fork of ``a/main`` exported as ``main``/``alt`` imports as ``b/main``/``b/alt`` and resumes there."""
    from graphckpt.subgraph import SEPARATOR, link_of

    source = MemorySaver()
    src = app_for(source)
    FAIL["on"] = False
    await src.ainvoke({}, thread_id="a/main")
    mid = (await src.ahistory("a/main"))[3]
    await src.afork("a/main", mid.checkpoint_id, update={"log": ["forked"]}, new_thread_id="a/alt")
    plain = await dump(source, "a/alt")
    assert [line async for line in export_thread(source, "a/alt", rename=lambda t: t)] == plain  # same bytes
    lines = [line async for line in export_thread(source, "a/alt", rename=_prefix("a/", ""))]
    assert not any('"a/' in line for line in lines)
    with pytest.raises(CorruptCheckpointError, match="not under 'x/'"):
        await import_thread(saver, lines, rename=_prefix("x/", ""))  # the importer's rename refuses an id
    assert await saver.list_threads() == []
    assert await import_thread(saver, lines, rename=_prefix("", "b/")) == "b/alt"
    dst = app_for(saver)
    assert (await dst.aget_state("b/alt")).values == (await src.aget_state("a/alt")).values
    history = await dst.ahistory("b/alt")
    assert {s.thread_id for s in history} == {"b/alt", "b/main"}
    fork_point = next(s for s in history if s.metadata.get("source") == "fork")
    assert fork_point.metadata["forked_from"]["thread_id"] == "b/main"
    done = await dst.aresume("b/alt")
    assert done.status == "done" and (await dst.athread("b/main")).status == "partial"
    with pytest.raises(GraphckptError, match=r"cannot export thread 'b/alt'.*not under 'a/'"):
        await dump_renamed(saver, "b/alt", _prefix("a/", ""))

    from support.subgraphs import child_graph, parent_graph

    calls: dict[str, int] = {}
    parent = parent_graph(child_graph(calls), source, calls)
    await parent.ainvoke({"log": ["in"], "x": 1}, thread_id="a/p")
    [child] = [t for t in await source.list_threads() if t.thread_id.startswith(f"a/p{SEPARATOR}")]
    out = [line async for line in export_thread(source, child.thread_id, rename=_prefix("a/", ""))]
    links = [link_of(json.loads(line)["metadata"]) for line in out if json.loads(line)["kind"] == "checkpoint"]
    assert links and all(link is not None and link["thread_id"] == "p" for link in links)
    assert await import_thread(saver, out, rename=_prefix("", "b/")) == "b/" + child.thread_id[2:]
    copied = await saver.get_thread("b/" + child.thread_id[2:])
    assert copied is not None and link_of(copied.metadata) is not None
    assert link_of(copied.metadata)["thread_id"] == "b/p"  # type: ignore[index]


async def dump_renamed(saver: Saver, thread_id: str, rename: Any) -> list[str]:
    return [line async for line in export_thread(saver, thread_id, rename=rename)]
