"""The approval node: the first run stops at ``ctx.interrupt``; the resumed run gets the answer and writes it."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
from support.fake_context import FakeContext, Interrupted

from graphckpt import END, START, Saver, SerializationError, StateGraph
from graphckpt.errors import ThreadStateError
from graphckpt.savers.memory import MemorySaver
from nodes import Approval, ApprovalError, PromptError, approval_node, parse_approval
from nodes.human import MAX_ASKS


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


class Answers(FakeContext):
    """A context whose successive interrupts get the given answers in turn, then stop the thread."""

    def __init__(self, *answers: Any, node: str = "approve") -> None:
        super().__init__(node=node)
        self.answers = list(answers)

    def interrupt(self, payload: Any) -> Any:
        self.interrupts.append(payload)
        if not self.answers:
            raise Interrupted(payload)
        return self.answers.pop(0)


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
def test_invalid_answers_ask_again_naming_the_problem(answer: Any, message: str) -> None:
    node = approval_node("Deploy?")
    ctx = Answers(answer)
    with pytest.raises(Interrupted) as info:
        node(Deploy(), ctx)
    first, again = ctx.interrupts
    assert again == {**first, "error": again["error"]} and "error" not in first
    assert again["error"].startswith("node 'approve': ") and message in again["error"]
    with pytest.raises(ApprovalError, match=r"node 'approve'") as err:
        parse_approval(answer, node="approve")
    assert message in str(err.value)
    assert info.value.payload == again


def test_a_corrected_answer_after_bad_ones_is_written() -> None:
    node = approval_node("Deploy {service}?", comment_key="review_comment")
    ctx = Answers("yes", {"approved": "y"}, {"approved": False, "comment": "not today"})
    assert node(Deploy(), ctx) == {"approved": False, "review_comment": "not today"}
    assert [p.get("error", "")[:16] for p in ctx.interrupts] == ["", "node 'approve': ", "node 'approve': "]


def test_a_context_that_repeats_a_bad_answer_forever_gives_up() -> None:
    ctx = FakeContext(node="approve", answer="yes")  # returns "yes" to every interrupt
    with pytest.raises(ApprovalError, match=r"got str 'yes'.*giving up"):
        approval_node("Deploy?")(Deploy(), ctx)
    assert len(ctx.interrupts) == MAX_ASKS


async def test_bad_answer_through_the_engine_interrupts_again_then_completes() -> None:
    g = StateGraph(Deploy)
    g.add_node("approve", approval_node("Deploy {service}?", comment_key="review_comment"))
    g.add_edge(START, "approve")
    g.add_edge("approve", END)
    app = g.compile(saver=MemorySaver())
    first = await app.ainvoke({}, thread_id="t")
    assert first.status == "interrupted" and "error" not in first.interrupts[0].payload

    again = await app.aresume("t", "yes")  # a typo by the human: asked again, not failed
    assert again.status == "interrupted"
    (ask,) = again.interrupts
    assert ask.payload["question"] == "Deploy api?" and "got str 'yes'" in ask.payload["error"]
    with pytest.raises(ThreadStateError, match=r"waiting for an answer.*'error'.*got str"):
        await app.aresume("t")  # no answer: still waiting; the bad answer is not replayed into a failure

    done = await app.aresume("t", {"approved": True, "comment": "lgtm"})
    assert done.status == "done"
    assert done.values.approved is True and done.values.review_comment == "lgtm"


async def test_an_answer_that_cannot_be_stored_leaves_the_thread_interrupted(saver: Saver) -> None:
    g = StateGraph(Deploy)
    g.add_node("approve", approval_node("Deploy {service}?"))
    g.add_edge(START, "approve")
    g.add_edge("approve", END)
    app = g.compile(saver=saver)
    assert (await app.ainvoke({}, thread_id="t")).status == "interrupted"
    with pytest.raises(SerializationError, match=r"nodes\.human\.Approval"):
        await app.aresume("t", Approval(approved=True))  # parse_approval takes it, the journal cannot store it
    assert (await app.aget_state("t")).status == "interrupted"
    assert [t.status for t in await app.athreads()] == ["interrupted"]
    with pytest.raises(ThreadStateError, match="waiting for an answer"):
        await app.aresume("t")
    done = await app.aresume("t", True)
    assert done.status == "done" and done.values.approved is True


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


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("Deploy {}?", "positional field {}"),
        ("Deploy {service.nope}?", "cannot fill {service.nope}: AttributeError"),
        ("Deploy {service?", "not a valid template"),
    ],
)
def test_template_mistakes_are_prompt_errors(template: str, needle: str) -> None:
    with pytest.raises(PromptError, match=r"node 'approve': the approval question") as info:
        approval_node(template)(Deploy(), FakeContext(node="approve"))
    assert needle in str(info.value) and "{{ or }}" in str(info.value)


def test_parse_approval() -> None:
    assert parse_approval({"approved": True, "comment": "lgtm"}).comment == "lgtm"
    assert parse_approval(False).approved is False
