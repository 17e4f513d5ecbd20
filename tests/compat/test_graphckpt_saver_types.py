"""What GraphckptSaver stores: LangGraph's and LangChain's types and the registered ones round-trip; anything else is
refused when written, naming its type; stored bytes naming a type that is not registered load nothing."""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Interrupt, Send

from graphckpt.compat._lgtypes import langgraph_serializer
from graphckpt.compat.langgraph import GraphckptSaver
from graphckpt.errors import CorruptCheckpointError, SerializationError
from graphckpt.savers.sqlite import SqliteSaver


class Mood(enum.Enum):
    HAPPY = "happy"


class Profile(pydantic.BaseModel):
    name: str
    mood: Mood


@dataclasses.dataclass
class Note:
    text: str
    stars: int = 0


class NotRegistered:
    pass


@pytest.fixture
def saver(tmp_path: Path) -> Iterator[GraphckptSaver]:
    s = GraphckptSaver(SqliteSaver(tmp_path / "types.db"))
    yield s
    s.close()


def _roundtrip(saver: GraphckptSaver, values: dict[str, Any]) -> dict[str, Any]:
    config = generate_config(str(uuid.uuid4()))
    cp = generate_checkpoint(channel_values=values, channel_versions={k: 1 for k in values})
    stored = saver.put(config, cp, generate_metadata(), {k: 1 for k in values})
    saver.put_writes(stored, [("w", values)], "task-1")
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.pending_writes == [("task-1", "w", values)]
    return got.checkpoint["channel_values"]


def test_langchain_and_langgraph_types_round_trip(saver: GraphckptSaver) -> None:
    values = {
        "messages": [
            SystemMessage(content="be brief", id="s"),
            HumanMessage(content="hi", id="h", additional_kwargs={"x": [1, 2]}),
            AIMessage(content="", id="a", tool_calls=[{"name": "f", "args": {"q": 1}, "id": "c1"}]),
            ToolMessage(content="42", tool_call_id="c1", id="t"),
            RemoveMessage(id="h"),
        ],
        "sends": [Send("node", {"topic": "cats"}), Send("other", 3)],
        "interrupts": [Interrupt(value={"question": "ok?"}, id="i-1")],
        "command": Command(resume={"i-1": "yes"}, goto="node", update={"k": 1}),
    }
    got = _roundtrip(saver, values)
    assert got == values
    assert type(got["messages"][2]) is AIMessage and got["messages"][2].tool_calls[0]["args"] == {"q": 1}
    assert got["interrupts"][0].id == "i-1"


def test_registered_models_enums_and_dataclasses_round_trip(saver: GraphckptSaver) -> None:
    saver.register(Profile, Note)
    values = {"profile": Profile(name="ada", mood=Mood.HAPPY), "notes": [Note("x", 3)], "mood": Mood.HAPPY}
    assert _roundtrip(saver, values) == values


def test_register_graph_allows_the_types_its_schemas_name(saver: GraphckptSaver) -> None:
    class State(TypedDict):
        profile: Profile
        notes: Annotated[list[Note], lambda a, b: a + b]

    builder = StateGraph(State)
    builder.add_node("n", lambda s: {"notes": [Note("from node")]})
    builder.add_edge(START, "n")
    saver.register_graph(builder)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "schema"}}
    out = graph.invoke({"profile": Profile(name="ada", mood=Mood.HAPPY), "notes": []}, config)
    assert out["notes"] == [Note("from node")]
    assert graph.get_state(config).values["profile"] == Profile(name="ada", mood=Mood.HAPPY)


def test_an_unregistered_type_is_refused_when_written_naming_it(saver: GraphckptSaver) -> None:
    config = generate_config(str(uuid.uuid4()))
    cp = generate_checkpoint(channel_values={"bad": NotRegistered()}, channel_versions={"bad": 1})
    with pytest.raises(SerializationError, match=r"channel 'bad'.*NotRegistered"):
        saver.put(config, cp, generate_metadata(), {"bad": 1})
    assert saver.get_tuple(config) is None  # nothing was written
    good = saver.put(config, generate_checkpoint(), generate_metadata(), {})
    with pytest.raises(SerializationError, match=r"channel 'x' of task 't'.*NotRegistered"):
        saver.put_writes(good, [("x", NotRegistered())], "t")
    with pytest.raises(SerializationError, match="Note"):  # a dataclass needs registering too
        saver.put_writes(good, [("x", Note("n"))], "t")


def test_stored_bytes_naming_an_unregistered_type_load_nothing() -> None:
    writer = langgraph_serializer([Note])
    data = writer.dumps(Note("x"))
    reader = langgraph_serializer()  # the name is in the bytes; the class is not registered here
    with pytest.raises(CorruptCheckpointError, match=r"unregistered type .*Note"):
        reader.loads(data)
    forged = data.replace(b"Note", b"Path")  # a name that exists somewhere: still only the registry is consulted
    with pytest.raises(CorruptCheckpointError):
        writer.loads(forged)


def test_write_rows_are_compressed_and_rows_stored_plain_still_read() -> None:
    """A write row is zlib-packed when that pays (as a blob is); a plain row of an earlier version still reads."""
    import asyncio

    from graphckpt.compat._lgwrites import encode_writes, read_writes
    from graphckpt.savers.base import StoredWrite
    from graphckpt.savers.memory import MemorySaver

    ser = langgraph_serializer()
    message = AIMessage(content="x" * 2000, id="m1")
    rows, _ = encode_writes(ser, "t1", [("messages", [message]), ("__error__", ValueError("no"))], "~__pregel_pull, a")
    packed = next(r for r in rows if r.index == 0)
    assert packed.data[:1] == b"\x78" and len(packed.data) < 1000
    plain = StoredWrite("t1", "result", 0, ser.dumps(["p", "~__pregel_pull, a", [["w", "messages", [message]]]]))
    for stored in (rows, [plain]):
        got = asyncio.run(read_writes(ser, MemorySaver(), stored))
        assert ("t1", "messages", [message]) in got
    assert ("t1", "__error__", "ValueError('no')") in asyncio.run(read_writes(ser, MemorySaver(), rows))
