"""Tolerant, versioned loading (invariant 8): checkpoints written by an older schema still load and resume."""

from __future__ import annotations

import logging
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

from graphckpt import END, START, CorruptCheckpointError, GraphSetupError, Saver, StateGraph, append


class V1(BaseModel):
    notes: Annotated[list[str], append] = []
    legacy: str = "old"
    count: int = 0


class V2(BaseModel):
    notes: Annotated[list[str], append] = []
    count: int = 0
    priority: str = "normal"  # new field: filled from its default


class V3(BaseModel):
    notes: Annotated[list[str], append] = []
    total: int = 0  # renamed from count by a migration


def graph(schema: type[BaseModel], **kw: Any) -> StateGraph:
    g = StateGraph(schema, **kw)
    g.add_node("work", lambda s: {"notes": ["worked"]})
    g.add_edge(START, "work")
    g.add_edge("work", END)
    return g


async def test_old_checkpoint_drops_removed_fields_and_fills_new_ones(saver: Saver, caplog: Any) -> None:
    old = graph(V1).compile(saver=saver, interrupt_before=["work"])
    await old.ainvoke({"legacy": "x", "count": 3}, thread_id="t")
    new = graph(V2, version=2).compile(saver=saver, interrupt_before=["work"])
    with caplog.at_level(logging.WARNING, logger="graphckpt.codec"):
        snap = await new.aget_state("t")
    assert snap.values == V2(notes=[], count=3, priority="normal")
    assert snap.schema_version == 1
    assert "has field(s) the schema no longer has: legacy" in caplog.text
    done = await new.aresume("t")  # resuming with the new code works
    assert done.values.notes == ["worked"] and done.schema_version == 2


async def test_migrations_run_in_order(saver: Saver) -> None:
    await graph(V1).compile(saver=saver, interrupt_before=["work"]).ainvoke({"count": 4}, thread_id="t")

    def v1_to_v2(values: dict[str, Any]) -> dict[str, Any]:
        values.pop("legacy", None)
        return {**values, "priority": "high"}

    def v2_to_v3(values: dict[str, Any]) -> dict[str, Any]:
        values["total"] = values.pop("count") * 10
        values.pop("priority", None)
        return values

    app = graph(V3, version=3, migrations={1: v1_to_v2, 2: v2_to_v3}).compile(saver=saver)
    snap = await app.aget_state("t")
    assert snap.values == V3(notes=[], total=40)
    assert (await app.aresume("t")).values.total == 40
    reloaded = await app.aget_state("t")  # the first checkpoint written by v3 stored every channel again
    assert reloaded.values == V3(notes=["worked"], total=40) and reloaded.schema_version == 3
    fork = await app.afork("t", step=0, update={"notes": ["forked"]}, new_thread_id="f")  # a v1 source
    assert fork.values == V3(notes=["forked"], total=40)
    assert (await app.aget_state("f")).values == V3(notes=["forked"], total=40)


async def test_value_that_still_does_not_validate_names_the_field(saver: Saver) -> None:
    class Strict(BaseModel):
        notes: Annotated[list[str], append] = []
        count: dict[str, int] = {}

    await graph(V1).compile(saver=saver).ainvoke({"count": 1}, thread_id="t")
    app = graph(Strict, version=2).compile(saver=saver)
    with pytest.raises(CorruptCheckpointError, match="field 'count' does not fit"):
        await app.aget_state("t")


async def test_checkpoint_from_a_newer_schema_is_refused(saver: Saver) -> None:
    await graph(V2, version=5).compile(saver=saver).ainvoke({}, thread_id="t")
    with pytest.raises(CorruptCheckpointError, match="schema version 5, newer than this graph's version 2"):
        await graph(V2, version=2).compile(saver=saver).aget_state("t")


def test_migration_versions_are_checked() -> None:
    with pytest.raises(GraphSetupError, match="do not upgrade towards version 2"):
        StateGraph(V2, version=2, migrations={2: lambda v: v})


class Log1(BaseModel):
    items: Annotated[list[str], append] = []
    n: int = 0


class Log2(BaseModel):  # items renamed to log
    log: Annotated[list[str], append] = []
    n: int = 0


class Log2Kept(Log2):  # ... keeping the old field declared, so the migration can read it
    items: Annotated[list[str], append] = []


def log_graph(schema: type[BaseModel], **kw: Any) -> StateGraph:
    g = StateGraph(schema, **kw)
    g.add_node("add", lambda s: {"items": [f"i{s.n}"], "n": s.n + 1})
    g.add_edge(START, "add")
    g.add_conditional_edges("add", lambda s: "add" if s.n < 40 else END)
    return g


def reader(schema: type[BaseModel], **kw: Any) -> StateGraph:
    g = StateGraph(schema, **kw)
    g.add_node("noop", lambda s: {})
    g.add_edge(START, "noop")
    g.add_edge("noop", END)
    return g


def rename_items(values: dict[str, Any]) -> dict[str, Any]:
    values["log"] = values.pop("items")
    return values


async def test_a_migration_reading_a_reducer_field_the_schema_dropped_is_told_to_keep_it(saver: Saver) -> None:
    # A reducer field is stored as a snapshot plus deltas; without its reducer the deltas cannot be folded. The
    # migration used to get the snapshot's stale value (here 1 item of 40) without a word.
    await log_graph(Log1).compile(saver=saver).ainvoke({}, thread_id="t")
    g = reader(Log2, version=2, migrations={1: rename_items})
    with pytest.raises(GraphSetupError, match=r"reads field 'items'.*Keep declaring it"):
        await g.compile(saver=saver).aget_state("t")
    kept = reader(Log2Kept, version=2, migrations={1: rename_items})
    snap = await kept.compile(saver=saver).aget_state("t")
    assert snap.values.log == [f"i{k}" for k in range(40)] and snap.values.items == []
    past = await kept.compile(saver=saver).aget_state("t", step=17)
    assert past.values.log == [f"i{k}" for k in range(17)]


@pytest.mark.parametrize(
    "read",
    [
        lambda v: v.get("items", []),
        lambda v: ("items" in v) or [],
        lambda v: v.pop("items", []),
        lambda v: v.setdefault("items", []),
    ],
    ids=["get", "in", "pop", "setdefault"],
)
async def test_a_migration_reading_a_dropped_reducer_field_with_a_default_is_told_too(saver: Saver, read: Any) -> None:
    # The README: "reading one the schema dropped raises GraphSetupError". v.get("items", []) used to return the
    # default, so the migrated log was silently empty instead of the 40 items the thread has.
    await log_graph(Log1).compile(saver=saver).ainvoke({}, thread_id="t")
    g = reader(Log2, version=2, migrations={1: lambda v: {"n": v["n"], "log": read(v)}})
    with pytest.raises(GraphSetupError, match=r"reads field 'items'.*Keep declaring it"):
        await g.compile(saver=saver).aget_state("t")


async def test_a_migration_catching_key_error_still_learns_of_the_dropped_reducer_field(saver: Saver) -> None:
    def upgrade(v: dict[str, Any]) -> dict[str, Any]:
        try:
            v["log"] = v["items"]
        except KeyError:
            v["log"] = []
        return v

    await log_graph(Log1).compile(saver=saver).ainvoke({}, thread_id="t")
    with pytest.raises(GraphSetupError, match=r"reads field 'items'"):
        await reader(Log2, version=2, migrations={1: upgrade}).compile(saver=saver).aget_state("t")


async def test_a_dropped_reducer_field_nobody_reads_is_dropped_with_a_warning(saver: Saver, caplog: Any) -> None:
    await log_graph(Log1).compile(saver=saver).ainvoke({}, thread_id="t")
    g = reader(Log2, version=2, migrations={1: lambda v: {"n": v["n"]}})
    with caplog.at_level(logging.WARNING, logger="graphckpt.codec"):
        snap = await g.compile(saver=saver).aget_state("t")
    assert snap.values == Log2(log=[], n=40)
    assert "has field(s) the schema no longer has: items" in caplog.text
