"""Errors raised by the ready-made nodes. They join graphckpt's tree under :class:`GraphckptError`::

    GraphckptError
    ├── LLMError                        a model call failed: not retryable (401, 400, 404, ...) or out of retries
    ├── PromptError(ValueError)         a prompt template names a field the state does not have, or is malformed
    ├── ToolError(ValueError)           unknown tool or invalid arguments (only with ``tool_node(on_error="raise")``)
    └── ApprovalError(ValueError)       the answer given to an approval node is not a bool or {"approved", "comment"}

Inside a run the engine wraps these in ``NodeError``; the error raised here is its ``__cause__``. Messages name the
model, the HTTP status and the endpoint, the tool and the field, or the node. They never contain an API key.
"""

from __future__ import annotations

from graphckpt.errors import GraphckptError

__all__ = ["ApprovalError", "LLMError", "PromptError", "ToolError"]


class LLMError(GraphckptError):
    """A model call failed and will not be retried by the node (the engine's ``RetryPolicy`` may still re-run it)."""

    def __init__(
        self,
        message: str,
        *,
        model: str,
        endpoint: str,
        status: int | None = None,
        attempts: int = 1,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.model = model
        """The model the call asked for."""
        self.endpoint = endpoint
        """The URL called, without query string."""
        self.status = status
        """The HTTP status of the last response, or ``None`` for timeouts and connection errors."""
        self.attempts = attempts
        """How many requests were made for this call."""
        self.retryable = retryable
        """True when the node gave up on an error it would retry (retries exhausted or Retry-After too long)."""


class PromptError(GraphckptError, ValueError):
    """A prompt template refers to a field the state does not have, or is not a valid ``str.format`` template."""


class ToolError(GraphckptError, ValueError):
    """A tool call names an unknown tool or carries arguments that do not validate."""

    def __init__(self, message: str, *, tool: str, call_id: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.call_id = call_id


class ApprovalError(GraphckptError, ValueError):
    """The answer to an approval interrupt is neither a bool nor ``{"approved": bool, "comment": str}``."""
