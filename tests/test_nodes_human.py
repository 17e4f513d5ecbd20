"""The approval node: the first run stops at ``ctx.interrupt``; the resumed run gets the answer and writes it."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from fake_context import FakeContext, Interrupted

from nodes import ApprovalError, PromptError, approval_node, parse_approval


class Deploy(pydantic.BaseModel):
    service: str = "api"
    diff: str = "+1 -0"
    approved: bool | None = None
    review_comment: str | None = None


def test_first_run_interrupts_with_the_question() -> None:
    node = approval_node("Deploy {service} to production?", details=lambda s: {"diff": s.diff})
    ctx = FakeContext(node="approve")
    with pytest.raises(Interrupted) as info:
        node(Deploy(), ctx)
    assert info.value.payload == {
        "question": "Deploy api to production?",
        "node": "approve",
        "key": "approved",
        "expects": 'true, false or {"approved": bool, "comment": str}',
        "diff": "+1 -0",
    }


@pytest.mark.parametrize(
    ("answer", "update"),
    [
        (True, {"approved": True, "review_comment": None}),
        (False, {"approved": False, "review_comment": None}),
        ({"approved": False, "comment": "not on a Friday"}, {"approved": False, "review_comment": "not on a Friday"}),
        ({"approved": True}, {"approved": True, "review_comment": None}),
    ],
)
def test_resumed_run_writes_the_answer(answer: Any, update: dict[str, Any]) -> None:
    node = approval_node("Deploy {service}?", comment_key="review_comment")
    ctx = FakeContext(node="approve")
    with pytest.raises(Interrupted):
        node(Deploy(), ctx)
    assert node(Deploy(), ctx.rerun(answer=answer)) == update


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("yes", "got str 'yes'"),
        (1, "got int 1"),
        ({"approved": "maybe"}, "approved: Input should be a valid boolean"),
        ({"comment": "ok"}, "approved: Field required"),
        ({"approved": True, "by": "ann"}, "by: Extra inputs are not permitted"),
    ],
)
def test_invalid_answers_name_node_and_problem(answer: Any, message: str) -> None:
    node = approval_node("Deploy?")
    with pytest.raises(ApprovalError, match=r"node 'approve'") as info:
        node(Deploy(), FakeContext(node="approve", answer=answer))
    assert message in str(info.value)


def test_callable_prompt_dict_state_and_custom_key() -> None:
    node = approval_node(lambda s: f"Ship {s['service']}?", key="ship")
    ctx = FakeContext(answer=True)
    assert node({"service": "web"}, ctx) == {"ship": True}
    assert ctx.interrupts[0]["question"] == "Ship web?"


def test_skip_if_asks_nobody() -> None:
    node = approval_node("Deploy?", skip_if="approved")
    ctx = FakeContext()
    assert node(Deploy(approved=True), ctx) == {}
    assert ctx.interrupts == []


def test_unknown_template_field() -> None:
    with pytest.raises(PromptError, match=r"\{servce\}"):
        approval_node("Deploy {servce}?")(Deploy(), FakeContext())


def test_parse_approval() -> None:
    assert parse_approval({"approved": True, "comment": "lgtm"}).comment == "lgtm"
    assert parse_approval(False).approved is False
