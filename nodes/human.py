"""An approval node: stop the thread, ask a person, write the answer into the state.

::

    g.add_node("approve", approval_node("Deploy {service} to production?", comment_key="review_comment"))
    app.invoke(..., thread_id="t1")          # interrupted: {"question": "Deploy api to production?", ...}
    app.resume("t1", True)                   # or {"approved": False, "comment": "not on a Friday"}

The answer must be a bool or ``{"approved": bool, "comment": str}`` (comment optional). Anything else does not fail
the node: it asks again, with the same payload plus ``"error"`` saying what was wrong with the answer, so the thread
is interrupted again and the next ``resume`` gives the corrected answer. (:func:`parse_approval` itself raises
:class:`~nodes.errors.ApprovalError`.) The node is sync: ``ctx.interrupt`` stops the run the first time and returns
the answer after ``resume``; every question asked is a separate interrupt of the task, answered in turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pydantic

from ._base import NodeContext, format_template, state_get, state_mapping
from .errors import ApprovalError

__all__ = ["MAX_ASKS", "Approval", "approval_node", "parse_approval"]

MAX_ASKS = 100
"""How many times an approval node asks before an invalid answer raises :class:`ApprovalError`."""


class Approval(pydantic.BaseModel):
    """A validated answer to an approval question."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    approved: pydantic.StrictBool
    comment: str | None = None


def parse_approval(answer: Any, *, node: str = "?") -> Approval:
    """``answer`` (a bool or ``{"approved": bool, "comment": str}``) as an :class:`Approval`; else ApprovalError."""
    if isinstance(answer, bool):
        return Approval(approved=answer)
    if isinstance(answer, Approval):
        return answer
    if isinstance(answer, Mapping):
        try:
            return Approval.model_validate(dict(answer))
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in exc.errors())
            raise ApprovalError(f"node {node!r}: invalid approval answer {answer!r}: {problems}") from None
    raise ApprovalError(
        f'node {node!r}: an approval answer must be true, false or {{"approved": bool, "comment": str}}, '
        f"got {type(answer).__name__} {answer!r}"
    )


def approval_node(
    prompt: str | Callable[[Any], str],
    *,
    key: str = "approved",
    comment_key: str | None = None,
    details: Callable[[Any], Mapping[str, Any]] | None = None,
    skip_if: str | None = None,
) -> Callable[[Any, NodeContext], dict[str, Any]]:
    """A sync node ``(state, ctx) -> dict`` that asks ``prompt`` through ``ctx.interrupt`` and writes the answer.

    ``prompt`` is a ``str.format`` template over the state's fields or a function of the state. The interrupt payload
    is ``{"question", "node", "key", "expects"}`` plus whatever ``details(state)`` returns (e.g. the diff to review).
    The node writes ``{key: bool}`` and, with ``comment_key``, ``{comment_key: str | None}``. With ``skip_if``, the
    name of a state field: when that field is already true, the node writes nothing and asks nobody.

    An invalid answer is not an error: the node asks again (a new interrupt) with the payload plus ``"error"``, the
    problem with the last answer. After ``MAX_ASKS`` invalid answers in a row it raises :class:`ApprovalError`
    (a guard against a context that keeps returning the same bad answer).
    """

    def node(state: Any, ctx: NodeContext) -> dict[str, Any]:
        if skip_if is not None and state_get(state, skip_if):
            return {}
        question = prompt(state) if callable(prompt) else _format(prompt, state, ctx.node)
        payload: dict[str, Any] = {
            "question": question,
            "node": ctx.node,
            "key": key,
            "expects": 'true, false or {"approved": bool, "comment": str}',
        }
        if details is not None:
            payload.update(details(state))
        asked = payload
        for ask in range(1, MAX_ASKS + 1):
            try:
                approval = parse_approval(ctx.interrupt(asked), node=ctx.node)
                break
            except ApprovalError as exc:
                if ask == MAX_ASKS:
                    raise ApprovalError(f"{exc} (the {MAX_ASKS}th invalid answer in a row: giving up)") from None
                asked = {**payload, "error": str(exc)}
        update: dict[str, Any] = {key: approval.approved}
        if comment_key is not None:
            update[comment_key] = approval.comment
        return update

    node.__name__ = node.__qualname__ = f"approval_node_{key}"
    return node


def _format(template: str, state: Any, node: str) -> str:
    return format_template(template, state_mapping(state), node=node, what="the approval question")
