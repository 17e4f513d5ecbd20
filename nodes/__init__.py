"""Ready-made graphckpt nodes: an OpenAI-compatible chat node, tools, and human approval.

Every external call these nodes make goes through the task's effect journal, so resuming, retrying or answering an
interrupt never repeats a model or tool call that already happened. ``import graphckpt`` does not import this package.
Online model calls need the ``openai`` extra (``pip install graphckpt[openai]``); ``openai`` is imported only when
such a call is made, so ``import nodes`` and graphs on the offline model (:mod:`nodes.offline`) never load it.
"""

from __future__ import annotations

from ._base import NodeContext
from .errors import ApprovalError, LLMError, PromptError, ToolError
from .human import Approval, approval_node, parse_approval
from .llm import DEFAULT_MODEL, ChatModel, ChatResult, build_messages, chat_node
from .offline import OFFLINE_MODEL, OfflineAnswer, offline_completion, scripted
from .retry import LLMCallCounter, LLMRetry, llm_calls
from .tools import Tool, tool, tool_node

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
