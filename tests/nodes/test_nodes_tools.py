"""Tools declared as typed functions, and the node that runs a model's tool calls through the effect journal."""

from __future__ import annotations

import contextvars
import json
import threading
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
import pytest
from support.fake_context import FakeContext

from graphckpt import END, START, StateGraph
from graphckpt.savers.sqlite import SqliteSaver
from nodes import Tool, ToolError, tool, tool_node

invocations: list[str] = []


@tool
def get_weather(
    city: Annotated[str, pydantic.Field(description="City name, e.g. Oslo")], unit: Literal["c", "f"] = "c"
) -> dict[str, Any]:
    """Current temperature for a city.

    Longer text that is not part of the description.
    """
    invocations.append(f"weather:{city}")
    return {"city": city, "temp": 21.5 if unit == "c" else 70.7, "unit": unit}


class Sum(pydantic.BaseModel):
    total: int


@tool(name="add", description="Add two integers.")
async def add_numbers(a: int, b: int) -> Sum:
    invocations.append(f"add:{a}+{b}")
    return Sum(total=a + b)


def call(name: str, arguments: Any, call_id: str = "c1") -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


@pytest.fixture(autouse=True)
def reset_invocations() -> None:
    invocations.clear()


def test_schema_comes_from_the_signature() -> None:
    assert get_weather.openai_schema() == {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current temperature for a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Oslo", "title": "City"},
                    "unit": {"type": "string", "enum": ["c", "f"], "default": "c", "title": "Unit"},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    assert add_numbers.name == "add"
    assert add_numbers.openai_schema()["function"]["description"] == "Add two integers."


def test_validation_names_tool_and_field() -> None:
    assert get_weather.validate('{"city": "Oslo"}') == {"city": "Oslo", "unit": "c"}
    with pytest.raises(ToolError, match=r"tool 'get_weather': invalid arguments: unit: Input should be 'c' or 'f'"):
        get_weather.validate({"city": "Oslo", "unit": "k"})
    with pytest.raises(ToolError, match=r"city: Field required"):
        get_weather.validate({})
    with pytest.raises(ToolError, match=r"country: Extra inputs are not permitted"):
        get_weather.validate({"city": "Oslo", "country": "NO"})
    with pytest.raises(ToolError, match="not valid JSON"):
        get_weather.validate("{city")


def test_decorated_function_stays_callable_and_needs_annotations() -> None:
    assert get_weather("Oslo")["temp"] == 21.5

    def untyped(x):  # type: ignore[no-untyped-def]
        return x

    with pytest.raises(TypeError, match="parameter 'x' needs a type annotation"):
        Tool.from_function(untyped)


async def test_ainvoke_validates_and_dumps_models() -> None:
    assert await add_numbers.ainvoke('{"a": 2, "b": "3"}') == {"total": 5}


async def test_models_nested_in_a_result_are_dumped_too() -> None:
    @tool
    def sums(n: int) -> dict[str, Any]:
        return {"each": [Sum(total=i) for i in range(n)], "pair": (Sum(total=-1), "x")}

    assert await sums.ainvoke({"n": 2}) == {"each": [{"total": 0}, {"total": 1}], "pair": [{"total": -1}, "x"]}


async def test_tool_node_runs_calls_in_order_and_journals_them() -> None:
    node = tool_node([get_weather, add_numbers], messages_key="messages")
    state = {"tool_calls": [call("get_weather", {"city": "Oslo"}, "c1"), call("add", {"a": 1, "b": 2}, "c2")]}
    ctx = FakeContext()
    update = await node(state, ctx)
    assert update["tool_results"] == [
        {"tool_call_id": "c1", "name": "get_weather", "output": {"city": "Oslo", "temp": 21.5, "unit": "c"}},
        {"tool_call_id": "c2", "name": "add", "output": {"total": 3}},
    ]
    assert update["messages"] == [
        {"role": "tool", "tool_call_id": "c1", "content": '{"city": "Oslo", "temp": 21.5, "unit": "c"}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"total": 3}'},
    ]
    assert invocations == ["weather:Oslo", "add:1+2"]
    assert await node(state, ctx.rerun()) == update
    assert invocations == ["weather:Oslo", "add:1+2"]  # the re-run called no tool


async def test_unknown_tool_and_bad_arguments_become_error_results() -> None:
    node = tool_node([get_weather])
    state = {"tool_calls": [call("get_wether", {"city": "Oslo"}, "c1"), call("get_weather", {"town": "Oslo"}, "c2")]}
    results = (await node(state, FakeContext()))["tool_results"]
    assert results[0] == {
        "tool_call_id": "c1",
        "name": "get_wether",
        "error": "unknown tool 'get_wether' (known tools: get_weather)",
    }
    assert results[1]["name"] == "get_weather"
    assert "city: Field required" in results[1]["error"]
    assert "town: Extra inputs are not permitted" in results[1]["error"]
    assert invocations == []


async def test_on_error_raise() -> None:
    node = tool_node([get_weather], on_error="raise")
    with pytest.raises(ToolError, match="unknown tool 'nope'") as info:
        await node({"tool_calls": [call("nope", {}, "c9")]}, FakeContext())
    assert (info.value.tool, info.value.call_id) == ("nope", "c9")


async def test_a_failing_tool_propagates_and_finished_calls_are_not_repeated() -> None:
    attempts: list[int] = []

    @tool
    def flaky(n: int) -> int:
        """Fails the first time it sees n=2."""
        attempts.append(n)
        if n == 2 and attempts.count(2) == 1:
            raise ConnectionError("service down")
        return n * 10

    node = tool_node([flaky])
    state = {"tool_calls": [call("flaky", {"n": 1}, "a"), call("flaky", {"n": 2}, "b")]}
    ctx = FakeContext()
    with pytest.raises(ConnectionError):
        await node(state, ctx)
    update = await node(state, ctx.rerun())  # the engine's retry of the task
    assert [r["output"] for r in update["tool_results"]] == [10, 20]
    assert attempts == [1, 2, 2]  # n=1 ran once


async def test_pydantic_state_plain_functions_and_no_calls() -> None:
    class State(pydantic.BaseModel):
        calls: list[dict[str, Any]] = []
        out: list[dict[str, Any]] = []

    def shout(text: str) -> str:
        """Upper-case text."""
        return text.upper()

    node = tool_node([shout], calls_key="calls", results_key="out")
    assert await node(State(calls=[call("shout", {"text": "hi"})]), FakeContext()) == {
        "out": [{"tool_call_id": "c1", "name": "shout", "output": "HI"}]
    }
    assert await node(State(), FakeContext()) == {"out": []}


def test_duplicate_tool_names_are_refused() -> None:
    with pytest.raises(ValueError, match="two tools are named 'get_weather'"):
        tool_node([get_weather, get_weather])


# -- sync tools run in worker threads ----------------------------------------------------------------------------------
# Each tool below waits on a barrier that two calls must reach. Run one at a time (on the event loop, as sync tools
# once were), the first call waits alone and the barrier breaks after its timeout: the test fails instead of hanging.


def _meeting_tool(barrier: threading.Barrier, seen: list[str]) -> Tool:
    @tool
    def meet(who: str) -> str:
        """Wait until the other call arrives too."""
        seen.append(f"{who} in {threading.current_thread().name}")
        barrier.wait()  # raises BrokenBarrierError after the barrier's timeout if the other call never comes
        return f"{who} met"

    return meet


async def test_sync_tools_of_parallel_tasks_overlap(tmp_path: Path) -> None:
    class Trip(pydantic.BaseModel):
        tool_calls: list[dict[str, Any]] = []
        a: list[dict[str, Any]] = []
        b: list[dict[str, Any]] = []

    barrier, seen = threading.Barrier(2, timeout=30), []
    meet = _meeting_tool(barrier, seen)
    g = StateGraph(Trip)
    g.add_node("left", tool_node([meet], calls_key="tool_calls", results_key="a"))
    g.add_node("right", tool_node([meet], calls_key="tool_calls", results_key="b"))
    g.add_edge(START, "left")
    g.add_edge(START, "right")
    g.add_edge("left", END)
    g.add_edge("right", END)
    async with g.compile(saver=SqliteSaver(tmp_path / "runs.db")) as app:
        out = await app.ainvoke({"tool_calls": [call("meet", {"who": "x"})]}, thread_id="t1")
    assert out.values.a == out.values.b == [{"tool_call_id": "c1", "name": "meet", "output": "x met"}]
    assert not any("MainThread" in s for s in seen)  # each call ran in a worker thread, not on the loop's thread


async def test_parallel_tool_calls_of_one_message_overlap() -> None:
    barrier, seen = threading.Barrier(2, timeout=30), []
    node = tool_node([_meeting_tool(barrier, seen), get_weather], parallel=True)
    calls = [call("meet", {"who": "a"}, "c1"), call("nope", {}, "c2"), call("meet", {"who": "b"}, "c3")]
    ctx = FakeContext()
    update = await node({"tool_calls": calls}, ctx)
    assert update["tool_results"] == [  # in call order, whatever order they finished in
        {"tool_call_id": "c1", "name": "meet", "output": "a met"},
        {"tool_call_id": "c2", "name": "nope", "error": "unknown tool 'nope' (known tools: get_weather, meet)"},
        {"tool_call_id": "c3", "name": "meet", "output": "b met"},
    ]
    assert len(seen) == 2
    assert await node({"tool_calls": calls}, ctx.rerun()) == update  # journaled: the re-run meets nobody
    assert len(seen) == 2


async def test_parallel_calls_raise_the_first_failure_in_call_order() -> None:
    started = threading.Barrier(2, timeout=30)

    @tool
    def fail(n: int) -> int:
        """Both calls start, then each raises."""
        started.wait()
        raise LookupError(f"call {n}")

    with pytest.raises(LookupError, match="call 1"):
        await tool_node([fail], parallel=True)(
            {"tool_calls": [call("fail", {"n": 1}), call("fail", {"n": 2})]}, FakeContext()
        )


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")


async def test_a_sync_tool_sees_the_callers_contextvars() -> None:
    @tool
    def which() -> str:
        """The request id of the caller, read in the worker thread."""
        return f"{_REQUEST.get()} in {threading.current_thread() is threading.main_thread()}"

    _REQUEST.set("req-7")
    update = await tool_node([which])({"tool_calls": [call("which", {})]}, FakeContext())
    assert update["tool_results"][0]["output"] == "req-7 in False"
