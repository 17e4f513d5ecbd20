"""Hostile input values: a state field whose validator raises something other than a pydantic ``ValidationError``
is the input's fault, reported as :class:`InvalidUpdateError` naming the field, with nothing stored."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import AfterValidator, BaseModel

from graphckpt import END, START, InvalidNodeUpdateError, InvalidUpdateError, StateGraph
from graphckpt.savers.sqlite import SqliteSaver


def _no_boom(value: str) -> str:
    if value == "boom":
        raise RuntimeError("the validator itself broke")
    if value == "key":
        raise KeyError("missing")
    return value


class Picky(BaseModel):
    n: int = 0
    text: Annotated[str, AfterValidator(_no_boom)] = ""


def picky_app(path: Path, node_writes: dict[str, Any] | None = None) -> Any:
    def step(s: Picky) -> dict[str, Any]:
        return node_writes if node_writes is not None else {"n": s.n + 1}

    g = StateGraph(Picky)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(saver=SqliteSaver(path / "db.sqlite"))


@pytest.mark.parametrize(("text", "cause"), [("boom", RuntimeError), ("key", KeyError)])
async def test_an_input_whose_validator_raises_is_an_invalid_update_naming_the_field(
    tmp_path: Path, text: str, cause: type[Exception]
) -> None:
    app = picky_app(tmp_path)
    try:
        with pytest.raises(
            InvalidUpdateError, match=rf"input: value for field 'text' was refused.*{cause.__name__}"
        ) as info:
            await app.ainvoke({"text": text}, thread_id="t")
        assert isinstance(info.value.__cause__, cause)
        assert await app.athreads() == []  # nothing was stored
        assert (await app.ainvoke({"text": "fine"}, thread_id="t")).values.n == 1
    finally:
        await app.aclose()


async def test_a_node_update_whose_validator_raises_fails_the_run_naming_the_field(tmp_path: Path) -> None:
    app = picky_app(tmp_path, {"text": "boom"})
    try:
        with pytest.raises(InvalidNodeUpdateError, match=r"field 'text' was refused.*RuntimeError"):
            await app.ainvoke({}, thread_id="t")
        assert (await app.aget_state("t")).status == "failed"
    finally:
        await app.aclose()
