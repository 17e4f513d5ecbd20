"""Ready-made graphckpt nodes: an OpenAI-compatible chat node, tools, and human approval.

Every external call these nodes make goes through the task's effect journal, so resuming, retrying or answering an
interrupt never repeats a model or tool call that already happened. ``import graphckpt`` does not import this package.
Online model calls need the ``openai`` extra (``pip install graphckpt[openai]``); ``openai`` is imported only when
such a call is made, so ``import nodes`` and graphs on the offline model (:mod:`nodes.offline`) never load it.
The approval node's names (:mod:`nodes.human`) are imported on first use: building its pydantic model pulls in
pydantic's model machinery, which a graph without an approval node need not pay for when its process starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._base import NodeContext
from .errors import ApprovalError, LLMError, PromptError, ToolError
from .llm import DEFAULT_MODEL, ChatModel, ChatResult, build_messages, chat_node
from .offline import OFFLINE_MODEL, OfflineAnswer, offline_completion, scripted
from .retry import LLMCallCounter, LLMRetry, llm_calls
from .tools import Tool, tool, tool_node

if TYPE_CHECKING:
    from .human import Approval, approval_node, parse_approval

_LAZY = {"Approval": "human", "approval_node": "human", "parse_approval": "human"}
"""Public names imported from their module on first access (see the module docstring)."""

__all__ = [
    "Approval",
    "ApprovalError",
    "ChatModel",
    "ChatResult",
    "DEFAULT_MODEL",
    "LLMCallCounter",
    "LLMError",
    "LLMRetry",
    "NodeContext",
    "OFFLINE_MODEL",
    "OfflineAnswer",
    "PromptError",
    "Tool",
    "ToolError",
    "approval_node",
    "build_messages",
    "chat_node",
    "llm_calls",
    "offline_completion",
    "parse_approval",
    "scripted",
    "tool",
    "tool_node",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
