"""The offline model: a deterministic stand-in for a chat model, so graphs run with no endpoint, key or network.

It is used when no ``OPENAI_BASE_URL`` or ``OPENAI_API_KEY`` is configured (see :mod:`nodes.llm`) and it reports its
model name as ``graphckpt-offline``. It is **not** a language model. What it says comes from an *answer function*
(:data:`OfflineAnswer`): ``messages -> text``, given to ``chat_node(..., offline_answer=...)`` or
``ChatModel(offline_answer=...)``. Without one, :func:`echo_answer` notes the request. :func:`scripted` builds an
answer function from rules (first matching phrase wins), the way an example or a test scripts its model; the demo's
canned answers live with the demo (``examples/demo_answers.py``).

The same messages always give the same completion, byte for byte (as long as the answer function is deterministic);
the default answer carries a short digest of the prompt, so a changed prompt visibly changes it. Usage is counted in
whitespace-separated tokens. Tools offered to it are ignored: it never asks for a tool call.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = [
    "OFFLINE_MODEL",
    "OfflineAnswer",
    "echo_answer",
    "message_text",
    "offline_completion",
    "prompt_digest",
    "scripted",
]

OFFLINE_MODEL = "graphckpt-offline"
"""The model name the offline model reports (in usage, in the checkpoint metadata and in its answers)."""

OfflineAnswer = Callable[[Sequence[Mapping[str, Any]]], str]
"""What the offline model says: a (deterministic) function of the messages returning the answer's text."""


def prompt_digest(messages: Sequence[Mapping[str, Any]]) -> str:
    """8 hex digits identifying the messages (stable across processes, unlike ``hash``)."""
    data = json.dumps([message_text(m.get("content")) for m in messages], ensure_ascii=False)
    return hashlib.sha256(data.encode()).hexdigest()[:8]


def message_text(content: Any) -> str:
    """Message content as text (content parts are joined; ``None`` is empty)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) if isinstance(part, Mapping) else str(part) for part in content)
    return str(content)


def echo_answer(messages: Sequence[Mapping[str, Any]]) -> str:
    """The default answer: notes the first line of the last user message, tagged with the prompt's digest."""
    user = next((message_text(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    first = next((line.strip() for line in user.splitlines() if line.strip()), "the request")
    subject = re.sub(r"^(request|task)\s*:\s*", "", first, flags=re.IGNORECASE)[:100]
    return (
        f"[{OFFLINE_MODEL} #{prompt_digest(messages)}] Noted: {subject}. "
        "(Offline model: set OPENAI_BASE_URL or OPENAI_API_KEY for a real one.)"
    )


def scripted(
    rules: Sequence[tuple[str, str | OfflineAnswer]], *, default: OfflineAnswer = echo_answer
) -> OfflineAnswer:
    """An answer function from ``(phrase, answer)`` rules, tried in order against the system messages, then the user
    messages (case-insensitive substring match); ``answer`` is a text or an answer function. No match: ``default``.

    ::

        model = scripted([("review", "Verdict: ok"), ("write", lambda messages: "def f(): ...")])
        chat_node("Request: {request}", system="Review the code.", output_key="review", offline_answer=model)
    """
    lowered = [(phrase.lower(), answer) for phrase, answer in rules]

    def answer(messages: Sequence[Mapping[str, Any]]) -> str:
        for roles in (("system", "developer"), ("user",)):
            text = " ".join(message_text(m.get("content")) for m in messages if m.get("role") in roles).lower()
            for phrase, found in lowered:
                if phrase in text:
                    return found if isinstance(found, str) else found(messages)
        return default(messages)

    return answer


def offline_completion(messages: Sequence[Mapping[str, Any]], answer: OfflineAnswer | None = None) -> dict[str, Any]:
    """Answer ``messages`` with ``answer`` (default :func:`echo_answer`); the result has the shape of an OpenAI chat
    completion, as plain data."""
    content = (answer or echo_answer)(messages)
    if not isinstance(content, str):
        raise TypeError(f"an offline answer function must return str, got {type(content).__name__}")
    digest = prompt_digest(messages)
    prompt_tokens = sum(len(message_text(m.get("content")).split()) for m in messages)
    completion_tokens = len(content.split())
    return {
        "id": f"offline-{digest}",
        "object": "chat.completion",
        "created": 0,
        "model": OFFLINE_MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "tool_calls": None},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
