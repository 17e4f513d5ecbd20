"""What the ready-made nodes need from the engine, written down as a structural type.

:class:`NodeContext` is the part of ``graphckpt.Context`` the nodes in this package use. It is a ``Protocol`` so the
nodes type-check against the engine's context and against a test stand-in alike. The helpers read a state that is
either a pydantic model (attribute access) or a mapping (TypedDict schemas).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping
from typing import Any, NoReturn, Protocol

from .errors import PromptError

__all__ = ["NodeContext", "format_template", "state_get", "state_mapping"]


class NodeContext(Protocol):
    """The node-facing context: identity of the running task, the effect journal, usage reporting and interrupts."""

    @property
    def thread_id(self) -> str:
        """The thread the task belongs to."""

    @property
    def node(self) -> str:
        """The name of the running node."""

    @property
    def task_id(self) -> str:
        """The task's id, stable across re-runs of the same task."""

    @property
    def step(self) -> int:
        """The super-step the task belongs to."""

    @property
    def attempt(self) -> int:
        """1 for the first run of the task, 2 for its first retry, ..."""

    @property
    def idempotency_key(self) -> str:
        """Stable for the task across re-runs; includes the index of the current (or next) effect call."""

    async def aeffect(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` once per task: journal its (plain-data) result, return the journaled result on re-runs."""

    def effect(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """The same as :meth:`aeffect`, for sync nodes."""

    def report_usage(self, model: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        """Record model name and token usage in the checkpoint metadata."""

    def interrupt(self, payload: Any) -> Any:
        """Stop the thread (status ``interrupted``); after ``resume(thread_id, answer)`` return ``answer``."""


def state_get(state: Any, key: str, default: Any = None) -> Any:
    """``state[key]`` for mapping states, ``state.key`` for pydantic states; ``default`` when absent."""
    if isinstance(state, Mapping):
        return state.get(key, default)
    return getattr(state, key, default)


def state_mapping(state: Any) -> Mapping[str, Any]:
    """The state's fields as a read-only mapping (shallow: field values are not copied or dumped)."""
    if isinstance(state, Mapping):
        return state
    fields = getattr(type(state), "model_fields", None)
    if fields is not None:
        return {name: getattr(state, name) for name in fields}
    return dict(vars(state))


_BRACES = "a literal brace is written {{ or }}"


def format_template(template: str, fields: Mapping[str, Any], *, node: str, what: str = "the prompt template") -> str:
    """``template.format_map(fields)``; every mistake in the template raises :class:`PromptError` naming ``node``,
    the field or the syntax problem, and the brace hint (instead of a bare ``KeyError``/``ValueError``/...)."""
    names = ", ".join(sorted(map(str, fields))) or "none"

    def fail(problem: str) -> NoReturn:
        raise PromptError(f"node {node!r}: {what} {problem}; {_BRACES}") from None

    formatter = string.Formatter()
    try:
        parsed = list(formatter.parse(template))
    except ValueError as exc:  # "Single '}' encountered", "expected '}' before end of string", ...
        fail(f"is not a valid template: {exc} (in {_excerpt(template)})")
    for _, field, _, _ in parsed:
        if field is None:
            continue
        match = re.match(r"[^.\[]*", field)
        name = match.group() if match else field
        if not name or name.isdigit():
            fail(f"has a positional field {{{field}}}; name a state field inside the braces (fields: {names})")
        if name not in fields:
            fail(f"refers to {{{field}}}, which is not a state field (fields: {names})")
        try:
            formatter.get_field(field, (), fields)
        except (LookupError, AttributeError, TypeError, ValueError) as exc:
            fail(f"cannot fill {{{field}}}: {type(exc).__name__}: {exc}")
    try:
        return formatter.vformat(template, (), fields)
    except (LookupError, AttributeError, TypeError, ValueError) as exc:  # a bad conversion or format spec
        fail(f"cannot be filled: {type(exc).__name__}: {exc} (in {_excerpt(template)})")


def _excerpt(template: str, limit: int = 60) -> str:
    return repr(template if len(template) <= limit else template[: limit - 3] + "...")
