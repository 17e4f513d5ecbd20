"""Optional OpenTelemetry spans, following the GenAI semantic conventions (extra ``graphckpt[otel]``, which depends on
``opentelemetry-api`` only: bring your SDK and exporter).

Off by default and free when off: nothing imports this module unless you do, and ``import graphckpt`` never imports
opentelemetry. Turn it on once per process::

    import graphckpt.telemetry
    graphckpt.telemetry.enable()                       # the global tracer provider; or tracer_provider=...
    graphckpt.telemetry.enable(capture_content=True)   # also the messages of model calls (off by default)

The spans (the conventions are still "development" status: every name and attribute used is pinned below):

- ``invoke_workflow {graph}`` (INTERNAL), one per run (``invoke``, ``resume``, ``stream``), with the thread id as
  ``gen_ai.conversation.id``. A run that continues a thread links to the span of the run that wrote its head (its
  trace context is stored in each checkpoint's metadata under ``trace``), so a resumed trace points at the first.
- ``super_step {n}`` per super-step under it, and ``invoke_agent {node}`` per task (per attempt) under that.
- ``chat {model}`` (CLIENT) for each model call of :func:`nodes.llm.chat_node`: ``gen_ai.provider.name``, request and
  response model, ``gen_ai.usage.input_tokens``/``output_tokens``, ``gen_ai.response.finish_reasons``;
  ``execute_tool {name}`` for each call of :func:`nodes.tools.tool_node`; any other ``ctx.aeffect`` is a span
  named after its function. Each carries its idempotency key. A call answered from the effect journal (a resumed or
  retried task) is a span with ``graphckpt.replayed = true`` and no token attributes, so a dashboard summing tokens
  never counts a resumed run's spend twice.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from graphckpt import _hook
from graphckpt.audit import CallInfo
from graphckpt.checkpoint import Task

__all__ = ["Tracer", "disable", "enable"]

# -- span names ---------------------------------------------------------------------------------------------------
SPAN_RUN = "invoke_workflow {graph}"
SPAN_STEP = "super_step {step}"
SPAN_TASK = "invoke_agent {node}"
# model and tool calls are named by their CallInfo: "chat {model}", "execute_tool {name}"

# -- attributes (GenAI semantic conventions) ----------------------------------------------------------------------
OPERATION = "gen_ai.operation.name"
CONVERSATION_ID = "gen_ai.conversation.id"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
RESPONSE_MODEL = "gen_ai.response.model"
RESPONSE_ID = "gen_ai.response.id"
FINISH_REASONS = "gen_ai.response.finish_reasons"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
AGENT_NAME = "gen_ai.agent.name"
TOOL_NAME = "gen_ai.tool.name"
INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
ERROR_TYPE = "error.type"
# -- graphckpt's own ----------------------------------------------------------------------------------------------
STEP = "graphckpt.step"
TASK_ID = "graphckpt.task.id"
ATTEMPT = "graphckpt.attempt"
IDEMPOTENCY_KEY = "graphckpt.idempotency_key"
REPLAYED = "graphckpt.replayed"
RESUMES = "graphckpt.resumes"
"""On a run span: the trace id of the run whose head it continues."""

TOKEN_ATTRIBUTES = (INPUT_TOKENS, OUTPUT_TOKENS)


class Tracer:
    """The engine's tracing (see :mod:`graphckpt._hook`) on an OpenTelemetry tracer."""

    def __init__(self, tracer_provider: trace.TracerProvider | None = None, *, capture_content: bool = False) -> None:
        self.tracer = trace.get_tracer("graphckpt", tracer_provider=tracer_provider)
        self.capture_content = capture_content

    def run_span(self, graph: str, thread_id: str, resumes: Mapping[str, Any] | None) -> Any:
        links = []
        attributes: dict[str, Any] = {OPERATION: "invoke_workflow", CONVERSATION_ID: thread_id}
        previous = _span_context(resumes)
        if previous is not None:
            links.append(Link(previous, {"graphckpt.link": "resumes"}))
            attributes[RESUMES] = format(previous.trace_id, "032x")
        # a child of the caller's current span, if any (an HTTP request handling the run); else a new trace
        return self.tracer.start_span(
            SPAN_RUN.format(graph=graph), kind=SpanKind.INTERNAL, attributes=attributes, links=links
        )

    def step_span(self, parent: Any, thread_id: str, step: int) -> Any:
        return self.tracer.start_span(
            SPAN_STEP.format(step=step),
            context=trace.set_span_in_context(parent),
            attributes={CONVERSATION_ID: thread_id, STEP: step},
        )

    def task_span(self, parent: Any, task: Task, attempt: int, thread_id: str, step: int) -> Any:
        return self.tracer.start_span(
            SPAN_TASK.format(node=task.node),
            context=trace.set_span_in_context(parent),
            attributes={
                OPERATION: "invoke_agent",
                AGENT_NAME: task.node,
                CONVERSATION_ID: thread_id,
                STEP: step,
                TASK_ID: task.id,
                ATTEMPT: attempt,
            },
        )

    def activate(self, span: Any) -> Any:
        return otel_context.attach(trace.set_span_in_context(span))

    def deactivate(self, token: Any) -> None:
        otel_context.detach(token)

    def call_span(self, info: CallInfo, key: str, *, replayed: bool) -> Any:
        operation, _, _ = info.name.partition(" ")
        attributes: dict[str, Any] = {IDEMPOTENCY_KEY: key, REPLAYED: replayed}
        if operation in ("chat", "execute_tool"):
            attributes[OPERATION] = operation
        if info.model is not None:
            attributes[REQUEST_MODEL] = info.model
        if info.system is not None:
            attributes[PROVIDER] = info.system
        if operation == "execute_tool":
            attributes[TOOL_NAME] = info.name.partition(" ")[2]
        if self.capture_content and operation == "chat":
            attributes[INPUT_MESSAGES] = _json(info.arguments[0] if isinstance(info.arguments, list) else None)
        kind = SpanKind.CLIENT if operation == "chat" else SpanKind.INTERNAL
        return self.tracer.start_span(info.name, kind=kind, attributes=attributes)

    def end_call(self, span: Any, info: CallInfo, result: Any, exc: BaseException | None) -> None:
        replayed = bool(span.attributes.get(REPLAYED)) if hasattr(span, "attributes") else False
        if exc is None and isinstance(result, Mapping) and info.name.startswith("chat "):
            if isinstance(result.get("model"), str):
                span.set_attribute(RESPONSE_MODEL, result["model"])
            if isinstance(result.get("id"), str) and result["id"]:
                span.set_attribute(RESPONSE_ID, result["id"])
            if result.get("finish_reason") is not None:
                span.set_attribute(FINISH_REASONS, [str(result["finish_reason"])])
            usage = result.get("usage")
            if isinstance(usage, Mapping) and not replayed:  # a replayed answer was paid for once, already
                span.set_attribute(INPUT_TOKENS, int(usage.get("prompt_tokens") or 0))
                span.set_attribute(OUTPUT_TOKENS, int(usage.get("completion_tokens") or 0))
            if self.capture_content:
                span.set_attribute(OUTPUT_MESSAGES, _json([result.get("message")]))
        self.end(span, exc)

    def end(self, span: Any, exc: BaseException | None = None) -> None:
        if exc is not None:
            span.set_attribute(ERROR_TYPE, type(exc).__name__)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        span.end()

    def trace_context(self, span: Any) -> dict[str, str]:
        ctx = span.get_span_context()
        return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def _span_context(stored: Mapping[str, Any] | None) -> SpanContext | None:
    """The span context stored in a checkpoint's metadata (``trace``), or ``None`` if there is none or it is bad."""
    if not isinstance(stored, Mapping):
        return None
    try:
        trace_id, span_id = int(str(stored["trace_id"]), 16), int(str(stored["span_id"]), 16)
    except (KeyError, ValueError):
        return None
    if not trace_id or not span_id:
        return None
    return SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=repr)


def enable(tracer_provider: trace.TracerProvider | None = None, *, capture_content: bool = False) -> Tracer:
    """Trace every run of this process from now on (see the module docstring). ``capture_content`` adds the
    messages of model calls to their spans. Returns the tracer."""
    tracer = Tracer(tracer_provider, capture_content=capture_content)
    _hook.TRACING = tracer
    return tracer


def disable() -> None:
    """Stop tracing (runs already going keep their spans)."""
    _hook.TRACING = None
