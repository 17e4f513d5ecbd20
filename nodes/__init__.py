"""Ready-made graphckpt nodes: an OpenAI-compatible chat node, tools, and human approval.

Every external call these nodes make goes through the task's effect journal, so resuming, retrying or answering an
interrupt never repeats a model or tool call that already happened. ``import graphckpt`` does not import this package;
``nodes.llm`` needs the ``openai`` extra (``pip install graphckpt[openai]``).
"""

from __future__ import annotations

from ._base import NodeContext
from .errors import ApprovalError, LLMError, PromptError, ToolError
from .human import Approval, approval_node, parse_approval
from .llm import DEFAULT_MODEL, ChatModel, ChatResult, build_messages, chat_node
from .offline import OFFLINE_MODEL, offline_completion
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
    "PromptError",
    "Tool",
    "ToolError",
    "approval_node",
    "build_messages",
    "chat_node",
    "llm_calls",
    "offline_completion",
    "parse_approval",
    "tool",
    "tool_node",
]
