"""LangGraph's idioms in graphckpt: reducer start values, dataclass state, the builder's LangGraph
methods, compile-time warnings, ``"*"`` interrupts, the default recursion limit and retry classification, the free
``interrupt()``, ``(state, config)`` nodes, and the messages reducer. Engine parity itself is in
``test_langgraph_parity.py``."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import httpx
import pydantic
import pytest
import requests

import graphckpt
from graphckpt import (
    END,
    REMOVE_ALL_MESSAGES,
    START,
    Command,
    GraphckptError,
    GraphckptWarning,
    GraphSetupError,
    InvalidUpdateError,
    MessagesState,
    NodeError,
    NodeTimeoutError,
    RemoveMessage,
    RetryPolicy,
    StateGraph,
    add_messages,
    default_retry_on,
    interrupt,
)
from graphckpt.savers.sqlite import SqliteSaver

# -- 1. reducer fields start at their type's empty value --------------------------------------------------------


class Log(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    best: Annotated[int, max]
    seq: Annotated[Sequence[str], operator.add]
    maybe: Annotated[list[str] | None, lambda old, new: (old or []) + new]
    note: str


def _one_node(schema: type[Any], fn: Any, saver: Any = None) -> graphckpt.App:
    g = StateGraph(schema)
    g.add_node("a", fn)
    g.add_edge(START, "a")
    g.add_edge("a", END)
    return g.compile(saver=saver)


def test_typeddict_reducers_get_an_empty_start_on_the_first_write() -> None:
    app = _one_node(Log, lambda s: {"best": 4, "log": ["a"]})
    out = app.invoke({"log": ["in"], "note": "n"}).values
    assert out == {"log": ["in", "a"], "best": 4, "seq": [], "note": "n"}  # `maybe` has no empty value: unset
    assert "maybe" not in out


def test_a_reducer_without_an_empty_value_gets_none_first() -> None:
    app = _one_node(Log, lambda s: {"maybe": ["x"]})
    assert app.invoke({}).values["maybe"] == ["x"]


def test_pydantic_reducer_fields_start_at_their_default() -> None:
    class S(pydantic.BaseModel):
        best: Annotated[int, max] = -5
        log: Annotated[list[str], operator.add] = pydantic.Field(default_factory=lambda: ["start"])

    app = _one_node(S, lambda s: {"best": -7, "log": ["a"]})
    assert app.invoke({}).values == S(best=-5, log=["start", "a"])


def test_a_thread_stored_without_the_field_loads_with_its_start_value(tmp_path: Path) -> None:
    class Before(TypedDict):
        n: int

    class After(TypedDict):
        n: int
        log: Annotated[list[str], operator.add]

    db = str(tmp_path / "t.db")
    with _one_node(Before, lambda s: {"n": s["n"] + 1}, SqliteSaver(db)) as old:
        old.invoke({"n": 1}, thread_id="t")
    g = StateGraph(After)
    g.add_node("a", lambda s: {"log": [str(s["n"])]})
    g.add_edge(START, "a")
    with g.compile(saver=SqliteSaver(db)) as new:
        assert new.get_state("t").values == {"n": 2, "log": []}
        assert new.invoke({"n": 5}, thread_id="t").values == {"n": 5, "log": ["5"]}


# -- dataclass state ------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Job:
    request: str
    log: Annotated[list[str], operator.add] = dataclasses.field(default_factory=list)
    tries: int = 0


def test_dataclass_state_runs_with_reducers_and_defaults() -> None:
    seen: list[Any] = []

    def work(state: Job) -> dict[str, Any]:
        seen.append(state)
        return {"log": [state.request], "tries": state.tries + 1}

    out = _one_node(Job, work).invoke({"request": "r"}).values
    assert out == Job("r", ["r"], 1)
    assert isinstance(seen[0], Job) and seen[0].log == []


def test_dataclass_state_requires_fields_without_default() -> None:
    with pytest.raises(InvalidUpdateError, match="request"):
        _one_node(Job, lambda s: None).invoke({"tries": 1})


def test_dataclass_state_refuses_a_returned_state() -> None:
    with pytest.raises(InvalidUpdateError, match="returned the state object"):
        _one_node(Job, lambda s: s).invoke({"request": "r"})


# -- 4. compile accepts what LangGraph runs ------------------------------------------------------------------------


class N(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]


def _say(name: str) -> Any:
    return lambda s: {"log": [name]}


def test_an_unreachable_node_warns_and_never_runs() -> None:
    g = StateGraph(N)
    g.add_node("a", _say("a")).add_node("lost", _say("lost"))
    g.add_edge(START, "a").add_edge("a", END).add_edge("lost", END)
    with pytest.warns(GraphckptWarning, match="unreachable from START never run: lost"):
        app = g.compile()
    assert app.invoke({}).values["log"] == ["a"]


def test_a_loop_without_exit_warns() -> None:
    g = StateGraph(N)
    g.add_node("a", _say("a")).add_node("b", _say("b"))
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", "a")
    with pytest.warns(GraphckptWarning, match="no path to END: a, b"):
        g.compile()


def test_a_node_without_outgoing_edges_ends_its_branch_silently() -> None:
    g = StateGraph(N)
    g.add_node("a", _say("a")).add_node("b", _say("b")).add_node("c", _say("c"))
    g.add_edge(START, "a").add_edge("a", "b").add_edge("a", "c").add_edge("c", END)
    snap = g.compile().invoke({})  # no warning: pytest's filterwarnings=error would raise it
    assert snap.values["log"] == ["a", "b", "c"] and snap.status == "done"


def test_command_routing_needs_no_destinations() -> None:
    g = StateGraph(N)
    g.add_node("a", lambda s: Command(update={"log": ["a"]}, goto="b"))
    g.add_node("b", _say("b"))
    g.add_edge(START, "a")
    assert g.compile().invoke({}).values["log"] == ["a", "b"]


def test_structural_errors_are_still_errors() -> None:
    g = StateGraph(N)
    g.add_node("a", _say("a"))
    g.add_edge(START, "a").add_edge("a", "nowhere")
    with pytest.raises(GraphSetupError, match="unknown node 'nowhere'"):
        g.compile()
    with pytest.raises(GraphSetupError, match="no entry"):
        StateGraph(N).add_node("a", _say("a")).compile()


# -- builder methods ---------------------------------------------------------------------------------------------


def test_add_sequence_and_entry_and_finish_points() -> None:
    def first(s: N) -> dict[str, Any]:
        return {"log": ["first"]}

    g = StateGraph(N)
    g.add_sequence([first, ("second", _say("second")), ("third", _say("third"))])
    g.set_entry_point("first").set_finish_point("third")
    assert g.compile().invoke({}).values["log"] == ["first", "second", "third"]
    with pytest.raises(GraphSetupError, match="at least one node"):
        StateGraph(N).add_sequence([])


def test_conditional_entry_point() -> None:
    g = StateGraph(N)
    g.add_node("small", _say("small")).add_node("big", _say("big"))
    g.set_conditional_entry_point(lambda s: "big" if s["n"] > 3 else "small", ["small", "big"])
    app = g.compile()
    assert app.invoke({"n": 9}).values["log"] == ["big"]
    assert app.invoke({"n": 1}).values["log"] == ["small"]


def test_retry_policy_is_an_alias_of_retry() -> None:
    policy = RetryPolicy(max_attempts=2)
    g = StateGraph(N).add_node("a", _say("a"), retry_policy=policy)
    assert g.nodes["a"].retry is policy
    with pytest.raises(GraphSetupError, match="not both"):
        StateGraph(N).add_node("a", _say("a"), retry=policy, retry_policy=policy)


def test_input_and_output_schemas() -> None:
    class In(TypedDict):
        n: int

    class Out(TypedDict):
        log: list[str]

    g = StateGraph(N, input_schema=In, output_schema=Out)
    assert g.validate_input({"n": 2}) == {"n": 2}
    with pytest.raises(InvalidUpdateError, match="unknown state field 'log'"):
        g.validate_input({"log": ["x"]})
    assert g.output({"n": 2, "log": ["a"]}) == {"log": ["a"]}
    assert StateGraph(N).output({"n": 2}) == {"n": 2}

    class Shown(pydantic.BaseModel):
        log: list[str] = []

    assert StateGraph(N, output_schema=Shown).output({"n": 2, "log": ["a"]}) == Shown(log=["a"])

    class Stray(TypedDict):
        other: int

    with pytest.raises(GraphSetupError, match=r"input_schema has field.* other"):
        StateGraph(N, input_schema=Stray)


def test_a_run_takes_its_input_by_input_schema_and_streams_its_output_schema() -> None:
    class In(TypedDict):
        n: int

    class Out(TypedDict):
        log: list[str]

    g = StateGraph(N, input_schema=In, output_schema=Out)
    g.add_node("a", _say("a"))
    g.add_edge(START, "a")
    g.add_edge("a", END)
    app = g.compile()
    with pytest.raises(InvalidUpdateError, match="unknown state field 'log'"):
        app.invoke({"log": ["x"]}, thread_id="refused")
    assert list(app.stream({"n": 1}, thread_id="t", mode="values")) == [{"log": []}, {"log": ["a"]}]
    assert app.get_state("t").values == {"n": 1, "log": ["a"]}  # the checkpoint holds the whole state
    app.close()


def test_interrupt_on_every_node() -> None:
    g = StateGraph(N)
    g.add_node("a", _say("a")).add_node("b", _say("b"))
    g.add_edge(START, "a").add_edge("a", "b").add_edge("b", END)
    app = g.compile(interrupt_before="*")
    assert app.interrupt_before == {"a", "b"}
    assert app.invoke({}, thread_id="t").next == ("a",)
    assert app.resume("t").next == ("b",)
    assert g.compile(interrupt_after="*").interrupt_after == {"a", "b"}
    with pytest.raises(GraphSetupError, match='or "\\*"'):
        g.compile(interrupt_before="a")


# -- 5. defaults -------------------------------------------------------------------------------------------------


def test_default_recursion_limit() -> None:
    g = StateGraph(N).add_node("a", _say("a")).add_edge(START, "a")
    assert g.compile().recursion_limit == 10007


def _http_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://example.invalid")
    return httpx.HTTPStatusError("boom", request=request, response=httpx.Response(status, request=request))


def _requests_error(status: int | None) -> requests.HTTPError:
    if status is None:
        return requests.HTTPError("no response")
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError("boom", response=response)


@pytest.mark.parametrize(
    ("exc", "retried"),
    [
        (ConnectionError("refused"), True),
        (ConnectionResetError("reset"), True),
        (NodeTimeoutError("slow"), True),
        (_http_error(503), True),
        (_http_error(404), False),
        (_requests_error(502), True),
        (_requests_error(400), False),
        (_requests_error(None), True),
        (ValueError("bug"), False),
        (TypeError("bug"), False),
        (KeyError("bug"), False),
        (ZeroDivisionError(), False),
        (RuntimeError("bug"), False),
        (TimeoutError("plain"), False),
        (FileNotFoundError("gone"), False),
        (Exception("anything else"), True),
    ],
)
def test_default_retry_classification(exc: BaseException, retried: bool) -> None:
    assert default_retry_on(exc) is retried
    assert RetryPolicy().should_retry(exc, 1) is retried


def test_default_policy_does_not_retry_a_bug_but_retries_a_connection_error() -> None:
    calls: dict[str, int] = {"bug": 0, "flaky": 0}

    def bug(s: N) -> dict[str, Any]:
        calls["bug"] += 1
        raise ValueError("wrong")

    def flaky(s: N) -> dict[str, Any]:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise ConnectionError("try again")
        return {"log": ["ok"]}

    policy = RetryPolicy(initial_interval=0, jitter=False)
    for name, fn in (("bug", bug), ("flaky", flaky)):
        g = StateGraph(N).add_node(name, fn, retry=policy).add_edge(START, name)
        app = g.compile()
        if name == "bug":
            with pytest.raises(NodeError):
                app.invoke({})
        else:
            assert app.invoke({}).values["log"] == ["ok"]
    assert calls == {"bug": 1, "flaky": 2}


# -- 9. interrupt(), (state, config) nodes -----------------------------------------------------------------------


def test_free_interrupt_in_sync_and_async_state_nodes() -> None:
    class S(TypedDict):
        text: str

    def ask(state: S) -> dict[str, Any]:
        return {"text": interrupt("first?")}

    async def ask_again(state: S) -> dict[str, Any]:
        return {"text": state["text"] + interrupt("second?")}

    g = StateGraph(S).add_node("ask", ask).add_node("again", ask_again)
    g.add_edge(START, "ask").add_edge("ask", "again")
    app = g.compile()
    snap = app.invoke({"text": ""}, thread_id="t")
    assert [(i.node, i.payload) for i in snap.interrupts] == [("ask", "first?")]
    snap = app.resume("t", "A")
    assert [(i.node, i.payload) for i in snap.interrupts] == [("again", "second?")]
    assert app.resume("t", "B").values == {"text": "AB"}


def test_free_interrupt_outside_a_node_is_an_error() -> None:
    with pytest.raises(GraphckptError, match="only inside a node"):
        interrupt("?")

    g = StateGraph(N).add_node("a", _say("a")).add_node("b", _say("b"))
    g.add_edge(START, "a").add_conditional_edges("a", lambda s: interrupt("in a router"))
    with pytest.raises(NodeError, match="only inside a node"):
        g.compile().invoke({})


def test_a_config_parameter_is_refused() -> None:
    def node(state: N, config: dict[str, Any]) -> None: ...

    def typed(state: N, cfg: RunnableConfig) -> None: ...

    for fn in (node, typed):
        with pytest.raises(GraphSetupError, match=r"RunnableConfig.*\(state, ctx\)"):
            StateGraph(N).add_node("n", fn)

    def with_default(state: N, config: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"log": [repr(config)]}

    g = StateGraph(N).add_node("n", with_default).add_edge(START, "n")  # its own option: called with (state)
    assert g.compile().invoke({}).values["log"] == ["None"]


class RunnableConfig(TypedDict, total=False):
    """Stands in for langchain's (only the name matters)."""

    tags: list[str]


# -- messages ------------------------------------------------------------------------------------------------------


def msg(role: str, content: str, id: str | None = None) -> dict[str, Any]:
    return {"role": role, "content": content, **({"id": id} if id else {})}


def test_add_messages_appends_replaces_and_removes() -> None:
    history = add_messages([msg("user", "hi", "1")], [msg("assistant", "yo", "2")])
    assert history == [msg("user", "hi", "1"), msg("assistant", "yo", "2")]
    history = add_messages(history, msg("user", "edited", "1"))
    assert history == [msg("user", "edited", "1"), msg("assistant", "yo", "2")]
    assert add_messages(history, [RemoveMessage("1")]) == [msg("assistant", "yo", "2")]
    with pytest.raises(ValueError, match="no message has the id 'nope'"):
        add_messages(history, [RemoveMessage("nope")])
    assert add_messages(history, [RemoveMessage(REMOVE_ALL_MESSAGES), msg("user", "fresh", "3")]) == [
        msg("user", "fresh", "3")
    ]


def test_add_messages_ids_are_deterministic_and_distinct() -> None:
    first = add_messages([], ["hi", ("assistant", "hello"), "hi"])
    again = add_messages([], ["hi", ("assistant", "hello"), "hi"])
    assert first == again
    ids = [m["id"] for m in first]
    assert len(set(ids)) == 3  # the same content at another place is another message
    assert [m["role"] for m in first] == ["user", "assistant", "user"]
    later = add_messages(first, ["hi"])
    assert later[:3] == first and later[3]["id"] not in ids


def test_add_messages_with_pydantic_messages() -> None:
    class Msg(pydantic.BaseModel):
        role: str
        content: str
        id: str | None = None

    out = add_messages([Msg(role="user", content="a")], [Msg(role="assistant", content="b")])
    assert [m.content for m in out] == ["a", "b"] and all(m.id for m in out)
    replaced = add_messages(out, [Msg(role="assistant", content="B", id=out[1].id)])
    assert [m.content for m in replaced] == ["a", "B"]


def test_messages_state_ids_survive_storage_and_reload(tmp_path: Path) -> None:
    """The ids assigned while folding are assigned again, the same, when stored deltas are folded on load."""

    class Chat(TypedDict):
        messages: Annotated[list[Any], add_messages]

    def answer(state: Chat) -> dict[str, Any]:
        return {"messages": [("assistant", f"you said {state['messages'][-1]['content']}")]}

    def build(schema: type[Any]) -> StateGraph:
        g = StateGraph(schema).add_node("answer", answer)
        return g.add_edge(START, "answer").add_edge("answer", END)

    db = str(tmp_path / "chat.db")
    with build(Chat).compile(saver=SqliteSaver(db)) as app:
        app.invoke({"messages": ["hi"]}, thread_id="t")
        live = app.invoke({"messages": ["again"]}, thread_id="t").values
        past = [s.values for s in app.history("t")]
    with build(Chat).compile(saver=SqliteSaver(db)) as reopened:
        assert reopened.get_state("t").values == live
        assert [s.values for s in reopened.history("t")] == past
    assert [m["content"] for m in live["messages"]] == ["hi", "you said hi", "again", "you said again"]
    assert len({m["id"] for m in live["messages"]}) == 4


def test_messages_state_schema() -> None:
    g = StateGraph(MessagesState).add_node("echo", lambda s: {"messages": [msg("assistant", "echo")]})
    g.add_edge(START, "echo")
    out = g.compile().invoke({"messages": [msg("user", "hi", "u")]}).values["messages"]
    assert [m["content"] for m in out] == ["hi", "echo"] and out[1]["id"]
    assert StateGraph(MessagesState).state.defaults() == {"messages": []}
