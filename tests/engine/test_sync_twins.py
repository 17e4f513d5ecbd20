"""The sync facade: each sync method is the twin of an async one, made from it (same parameters, its result), and the
reads an app and a raw reader share are one implementation."""

from __future__ import annotations

import inspect
from typing import Any, TypedDict

from graphckpt import START, App, MemorySaver, StateGraph
from graphckpt.reader import RawReader
from graphckpt.reads import Reader

TWINS = [
    "invoke",
    "resume",
    "stream",
    "get_state",
    "history",
    "threads",
    "thread",
    "audit",
    "spend",
    "diff",
    "submit",
    "runs",
    "cancel_run",
    "crashed",
    "recover",
    "update_state",
    "delete_thread",
]


class S(TypedDict):
    n: int


def _app() -> App:
    g = StateGraph(S)
    g.add_node("inc", lambda s: {"n": s["n"] + 1})
    g.add_edge(START, "inc")
    return g.compile(MemorySaver())


def test_each_twin_has_the_async_signature_and_says_whose_twin_it_is() -> None:
    for name in TWINS:
        twin, original = getattr(App, name), getattr(App, f"a{name}")
        assert twin.__name__ == name and twin.__doc__ == f"Sync :meth:`a{name}`."
        assert inspect.signature(twin) == inspect.signature(original)


def test_a_twin_runs_the_async_method_and_returns_its_result() -> None:
    with _app() as app:
        snap = app.invoke({"n": 1}, thread_id="t")
        assert snap.values == {"n": 2} and app.get_state("t").values == {"n": 2}
        assert list(app.stream({"n": 5}, thread_id="u")) == [{"inc": {"n": 6}}]
        assert [t.thread_id for t in app.threads()] == ["u", "t"]


def test_an_app_and_a_raw_reader_read_through_the_same_reader() -> None:
    saver: Any = MemorySaver()
    app = _app().with_saver(saver)
    app.invoke({"n": 1}, thread_id="t")
    reader = RawReader(saver)
    assert isinstance(app, Reader) and isinstance(reader, Reader)
    assert reader.get_state("t").values == app.get_state("t").values == {"n": 2}
    assert [s.checkpoint_id for s in reader.history("t")] == [s.checkpoint_id for s in app.history("t")]
    reader.close()
    app.close()
