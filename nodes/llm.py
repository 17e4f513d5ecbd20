"""A chat node on the official ``openai`` client, for any OpenAI-compatible endpoint, with every call journaled.

Configuration (read when a call is made, explicit arguments win):

``OPENAI_BASE_URL``
    The endpoint, e.g. ``http://127.0.0.1:11434/v1``. Without it, OpenAI's own endpoint is used.
``OPENAI_API_KEY``
    The key. A local endpoint that needs none works with ``OPENAI_BASE_URL`` alone.
``GRAPHCKPT_MODEL``
    The model name when the node is given none (default ``gpt-4o-mini``).
``GRAPHCKPT_OFFLINE``
    ``1`` forces the offline model even when an endpoint is configured.

With neither ``OPENAI_BASE_URL`` nor ``OPENAI_API_KEY`` set, calls are answered by the deterministic built-in model
:mod:`nodes.offline`, reported as ``graphckpt-offline``; nothing leaves the machine. What it answers is the node's
``offline_answer`` (a function of the messages), by default a short note of the request.

The ``openai`` package is imported only when a call goes online: ``import nodes`` and offline runs never load it.

Every model call runs inside ``ctx.aeffect``: its result is journaled before the node goes on, so a task re-run after
a crash, a retry or an interrupt gets the recorded answer and the model is not called again. Usage is reported with
``ctx.report_usage`` on every run, also when the journal answered, so the checkpoint shows what its output cost.
Retries (429, 5xx, timeouts, connection errors) happen inside the effect, by :class:`~nodes.retry.LLMRetry`; the
``openai`` client's own retries are switched off. Other errors raise :class:`~nodes.errors.LLMError` at once.

In the audit record each HTTP attempt is its own entry (``ctx.record_request``): its outcome (``ok``, ``http_error``
with the status, ``timeout``, ``connection_error``, ``error``) and its usage when the server sent one. A request the
client timed out on may have been billed, but its usage never reaches the client: it is recorded as ``timeout`` with
its tokens unknown. The call is recorded as started (``ctx.call_ready``) only once the ``openai`` import, the client
and the request are ready: a call that fails before never reached the server, and the import is not in its duration.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, cast

import pydantic

from graphckpt.audit import describe_call

from ._base import NodeContext, format_template, state_mapping
from .errors import LLMError
from .offline import OFFLINE_MODEL, OfflineAnswer, offline_completion
from .retry import LLMRetry, is_retryable_status, llm_calls, parse_retry_after
from .tools import Tool

if TYPE_CHECKING:
    import openai

__all__ = ["DEFAULT_MODEL", "ChatModel", "ChatResult", "build_messages", "chat_node"]

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-4o-mini"
"""The model used when neither the node nor ``GRAPHCKPT_MODEL`` names one."""

Message = dict[str, Any]
Prompt = str | Callable[[Any], str | Sequence[Mapping[str, Any]]]


class ChatResult(TypedDict):
    """What one model call returns and the journal stores (plain data only)."""

    id: str
    model: str
    """The model that answered, as the endpoint reported it (``graphckpt-offline`` for the offline model)."""
    message: Message
    """``{"role": "assistant", "content": str | None, "tool_calls": [...]}`` (``tool_calls`` only when present)."""
    finish_reason: str | None
    usage: dict[str, int]
    """``prompt_tokens``, ``completion_tokens``, ``total_tokens``."""


@dataclass(frozen=True)
class ChatModel:
    """A configured chat model. :meth:`acall` is the journaled call; :meth:`create` the raw one (with retries).

    ``client`` is used as given (it is not closed; its own retries are turned off per request); otherwise a client is
    made for each call from ``base_url``/``api_key`` or the environment, and closed after it.
    """

    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    client: openai.AsyncOpenAI | None = field(default=None, repr=False, compare=False)
    timeout: float = 60.0
    """Seconds per request; a request that takes longer is retried."""
    retry: LLMRetry = field(default_factory=LLMRetry)
    offline: bool | None = None
    """``True`` forces the offline model, ``False`` forbids it, ``None`` decides from the environment."""
    offline_answer: OfflineAnswer | None = field(default=None, repr=False, compare=False)
    """What the offline model answers (a function of the messages); ``None``: :func:`nodes.offline.echo_answer`."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Further ``chat.completions.create`` arguments (``temperature``, ``max_tokens``, ``response_format``, ...).
    Not ``stream``: the node journals whole completions."""

    def __post_init__(self) -> None:
        if self.params.get("stream"):
            raise ValueError("stream=True is not supported: the node journals whole completions, not chunks")

    def is_offline(self) -> bool:
        """Whether calls go to the offline model (see the module docstring for the rule)."""
        if self.offline is not None:
            return self.offline
        if self.client is not None or self.base_url or self.api_key:
            return False
        if os.environ.get("GRAPHCKPT_OFFLINE", "").strip() not in ("", "0"):
            return True
        return not (os.environ.get("OPENAI_BASE_URL") or os.environ.get("OPENAI_API_KEY"))

    def provider(self) -> str:
        """The provider name the audit record and telemetry show (``gen_ai.provider.name``)."""
        if self.is_offline():
            return "graphckpt.offline"
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or ""
        return "openai" if not url or "api.openai.com" in url else "openai_compatible"

    def model_name(self) -> str:
        """The model asked for: ``graphckpt-offline`` offline, else the given one, ``GRAPHCKPT_MODEL``, the default."""
        if self.is_offline():
            return OFFLINE_MODEL
        return self.model or os.environ.get("GRAPHCKPT_MODEL") or DEFAULT_MODEL

    async def acall(
        self, ctx: NodeContext, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Tool] = ()
    ) -> ChatResult:
        """One journaled model call: the model is only called if this task has no recorded result for it yet.

        When a ``messages`` stream reads the run (``ctx.streams_messages``), the answer is streamed from the model and
        each piece goes to ``ctx.stream_message`` as it arrives; the journal still records the whole completion. A
        call the journal answers sends its whole answer as one piece."""
        plain = [dict(m) for m in messages]
        send: Callable[..., None] | None = getattr(ctx, "stream_message", None)
        if not getattr(ctx, "streams_messages", False):
            send = None
        sent: list[str] = []

        def on_piece(piece: str, completion_id: str) -> None:
            sent.append(piece)
            if send is not None:
                send(piece, id=completion_id)

        ready: Callable[[], Awaitable[None]] | None = getattr(ctx, "call_ready", None)
        report: RequestReport | None = getattr(ctx, "record_request", None)

        async def call_model() -> ChatResult:  # reads the key inside the effect: it names this very call
            return await self.create(
                plain,
                tools=tools,
                idempotency_key=ctx.idempotency_key,
                on_piece=on_piece if send else None,
                on_ready=ready,
                on_request=report,
            )

        model = self.model_name()
        describe_call(
            call_model,
            f"chat {model}",
            arguments=[plain, [t.name for t in tools]],
            model=model,
            usage=_usage,
            system=self.provider(),
            deferred_start=ready is not None,  # started when the request is ready, after the import and the client
        )
        result = cast(ChatResult, await ctx.aeffect(call_model))
        if send is not None and not sent and result["message"].get("content"):
            send(result["message"]["content"], id=result["id"])
        usage = result["usage"]
        ctx.report_usage(result["model"], usage["prompt_tokens"], usage["completion_tokens"])
        return result

    async def create(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Tool] = (),
        idempotency_key: str | None = None,
        on_piece: Callable[[str, str], None] | None = None,
        on_ready: Callable[[], Awaitable[None]] | None = None,
        on_request: RequestReport | None = None,
    ) -> ChatResult:
        """Call the model now (not journaled), retrying as :attr:`retry` says. Counted in :data:`llm_calls`. With
        ``on_piece``, the answer is streamed (``stream=True``) and ``on_piece(text, completion_id)`` is called with
        each piece of its text as it arrives (the offline model hands over its answer word by word).

        ``on_ready()`` is awaited once everything that can fail before the first request is done (the ``openai``
        import, the client, the request's arguments); ``on_request(outcome, status=, usage=, ms=, error=)`` after
        each HTTP attempt (``ctx.call_ready`` and ``ctx.record_request`` in :meth:`acall`)."""
        llm_calls.record_call()
        if self.is_offline():
            llm_calls.record_request()
            if on_ready is not None:
                await on_ready()
            result = _normalize(offline_completion(messages, self.offline_answer), OFFLINE_MODEL, "offline")
            if on_piece is not None:
                for piece in re.findall(r"\s*\S+\s*", result["message"].get("content") or ""):
                    on_piece(piece, result["id"])
            if on_request is not None:
                usage = result["usage"]
                await on_request("ok", usage=(usage["prompt_tokens"], usage["completion_tokens"]))
        else:
            result = await self._create_online(messages, tools, idempotency_key, on_piece, on_ready, on_request)
        llm_calls.record_usage(result["usage"]["prompt_tokens"], result["usage"]["completion_tokens"])
        return result

    async def _create_online(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Tool],
        idempotency_key: str | None,
        on_piece: Callable[[str, str], None] | None = None,
        on_ready: Callable[[], Awaitable[None]] | None = None,
        on_request: RequestReport | None = None,
    ) -> ChatResult:
        await _import_openai()
        import openai  # here, not at module level: importing it costs about 0.6 s, and offline runs never need it

        model = self.model_name()
        kwargs: dict[str, Any] = {**self.params, "model": model, "messages": list(messages)}
        if tools:
            kwargs["tools"] = [t.openai_schema() for t in tools]
        if idempotency_key is not None:
            kwargs["extra_headers"] = {"Idempotency-Key": idempotency_key}
        if on_piece is not None:
            kwargs["stream"], kwargs["stream_options"] = True, {"include_usage": True}
        async with self._client() as client:
            endpoint = _endpoint(str(client.base_url).rstrip("/") + "/chat/completions")
            attempt = 0
            cause: BaseException | None = None  # chained for connection errors only: status bodies may echo keys
            report = _Reports(on_request)
            if on_ready is not None:
                await on_ready()  # the start marker: nothing before the request can fail any more
            while True:
                attempt += 1
                llm_calls.record_request()
                report.began = time.perf_counter()
                try:
                    completion = await client.chat.completions.create(**kwargs)
                    if on_piece is not None and isinstance(completion, openai.AsyncStream):
                        dump = await _collect(completion, on_piece)
                    elif isinstance(completion, pydantic.BaseModel):
                        dump = completion.model_dump(mode="json")
                    else:  # the client hands over a non-JSON body as is
                        await report("error", status=200, error="not a chat completion")
                        raise LLMError(
                            f"model {model!r} at {endpoint} answered with something that is not a chat completion "
                            f"({self._redact(_excerpt(completion), client.api_key)}); is the base URL the API's?",
                            model=model,
                            endpoint=endpoint,
                            status=200,
                            attempts=attempt,
                        )
                    try:
                        result = _normalize(dump, model, endpoint)
                    except LLMError as exc:
                        await report("error", status=200, usage=_dump_usage(dump), error=str(exc))
                        raise
                    await report("ok", status=200, usage=_dump_usage(dump))
                    return result
                except openai.APIStatusError as exc:
                    status: int | None = exc.status_code
                    cause = None
                    retry_after = parse_retry_after(exc.response.headers)
                    detail = self._redact(_error_detail(exc), client.api_key)
                    await report("http_error", status=status, error=f"HTTP {status}")
                    if not is_retryable_status(exc.status_code):
                        raise LLMError(
                            f"model {model!r} at {endpoint} answered HTTP {status} (not retried): {detail}",
                            model=model,
                            endpoint=endpoint,
                            status=status,
                            attempts=attempt,
                        ) from None
                except openai.APITimeoutError as exc:
                    status, retry_after, cause = None, None, exc
                    detail = f"timed out after {self.timeout:g}s"
                    await report("timeout", error=detail)  # billed or not, the client never learns how much
                except openai.APIConnectionError as exc:
                    status, retry_after, cause = None, None, exc
                    detail = f"{exc} ({type(exc.__cause__).__name__}: {exc.__cause__})" if exc.__cause__ else str(exc)
                    await report("connection_error", error=self._redact(detail, client.api_key))
                delay = self.retry.delay(attempt, retry_after) if attempt <= self.retry.max_retries else None
                what = f"HTTP {status}" if status is not None else detail
                if delay is None:
                    why = (
                        f"asked to wait {retry_after:g}s, more than max_retry_after={self.retry.max_retry_after:g}s"
                        if retry_after is not None and attempt <= self.retry.max_retries
                        else f"gave up after {attempt} attempt(s)"
                    )
                    raise LLMError(
                        f"model {model!r} at {endpoint} failed with {what}; {why}: {detail}",
                        model=model,
                        endpoint=endpoint,
                        status=status,
                        attempts=attempt,
                        retryable=True,
                    ) from cause
                log.warning("model %r at %s: %s; retry %d in %.2fs", model, endpoint, what, attempt, delay)
                await self.retry.sleep(delay)

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[openai.AsyncOpenAI]:
        if self.client is not None:
            yield self.client.with_options(max_retries=0, timeout=self.timeout)
            return
        import openai

        base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or None
        api_key = self.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"  # local endpoints need none
        async with openai.AsyncOpenAI(
            api_key=api_key, base_url=base_url, max_retries=0, timeout=self.timeout
        ) as client:
            yield client

    def _redact(self, text: str, client_key: str | None = None) -> str:
        """``text`` without the API key (ours, the client's, or anything shaped like an OpenAI key)."""
        for key in (self.api_key, os.environ.get("OPENAI_API_KEY"), client_key):
            if key and len(key) >= 4:
                text = text.replace(key, "***")
        return re.sub(r"sk-[A-Za-z0-9_\-*]{4,}", "sk-***", text)


def chat_node(
    prompt: Prompt,
    *,
    output_key: str,
    system: str | None = None,
    model: str | ChatModel | None = None,
    tools: Sequence[Tool] = (),
    tool_calls_key: str = "tool_calls",
    messages_key: str | None = None,
    parse: Callable[[str], Any] | None = None,
    client: openai.AsyncOpenAI | None = None,
    base_url: str | None = None,
    api_key: str | None = None,
    timeout: float = 60.0,
    retry: LLMRetry | None = None,
    offline: bool | None = None,
    offline_answer: OfflineAnswer | None = None,
    **params: Any,
) -> Callable[[Any, NodeContext], Any]:
    """An async node ``(state, ctx) -> dict`` that makes one journaled chat call and writes its answer into the state.

    ``prompt`` is a ``str.format`` template over the state's fields (it becomes the user message; ``system``, also a
    template, the system message), or a function of the state returning the user message or the whole message list.
    The answer's text (through ``parse`` if given) is written to ``output_key``. With ``tools``, they are offered to
    the model and its tool calls (OpenAI format, ``[]`` when none) are written to ``tool_calls_key``, ready for
    :func:`nodes.tools.tool_node`. With ``messages_key``, the assistant message is written there as a one-item list
    (use an ``append`` reducer to keep a conversation). ``model`` is a model name or a ready :class:`ChatModel`; the
    other keyword arguments configure the model as :class:`ChatModel` documents (``params`` go to the API).
    """
    if isinstance(model, ChatModel):
        chat = model
    else:
        chat = ChatModel(
            model=model,
            base_url=base_url,
            api_key=api_key,
            client=client,
            timeout=timeout,
            retry=retry or LLMRetry(),
            offline=offline,
            offline_answer=offline_answer,
            params=params,
        )

    async def node(state: Any, ctx: NodeContext) -> dict[str, Any]:
        messages = build_messages(prompt, state, system=system, node=ctx.node)
        result = await chat.acall(ctx, messages, tools=tools)
        message = result["message"]
        text = message.get("content") or ""
        update: dict[str, Any] = {output_key: parse(text) if parse is not None else text}
        if tools:
            update[tool_calls_key] = list(message.get("tool_calls") or [])
        if messages_key is not None:
            update[messages_key] = [message]
        return update

    node.__name__ = node.__qualname__ = f"chat_node_{output_key}"
    return node


class RequestReport(Protocol):
    """``ctx.record_request``: what one HTTP attempt came to."""

    async def __call__(
        self,
        outcome: str,
        *,
        status: int | None = None,
        usage: tuple[int, int] | None = None,
        ms: float = 0.0,
        error: str | None = None,
    ) -> None: ...


class _Reports:
    """Hands each HTTP attempt's outcome to ``on_request`` with its duration (from :attr:`began`)."""

    def __init__(self, on_request: RequestReport | None) -> None:
        self.on_request, self.began = on_request, time.perf_counter()

    async def __call__(
        self, outcome: str, *, status: int | None = None, usage: tuple[int, int] | None = None, error: str = ""
    ) -> None:
        if self.on_request is not None:
            ms = (time.perf_counter() - self.began) * 1000
            await self.on_request(outcome, status=status, usage=usage, ms=ms, error=error or None)


def _dump_usage(dump: Mapping[str, Any]) -> tuple[int, int] | None:
    """``(prompt_tokens, completion_tokens)`` the server sent with a completion, ``None`` when it sent none."""
    usage = dump.get("usage")
    if not isinstance(usage, Mapping):
        return None
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


async def _import_openai() -> None:
    """Import ``openai`` off the event loop the first time (it takes 0.6-2 s): the lease's heartbeat keeps beating
    meanwhile, so a run with a short lease is not taken over, and its call made twice, because of an import."""
    if "openai" not in sys.modules:
        await asyncio.to_thread(importlib.import_module, "openai")


def build_messages(prompt: Prompt, state: Any, *, system: str | None = None, node: str = "?") -> list[Message]:
    """The messages for ``prompt`` on ``state``: an optional system message, then the user message(s)."""
    fields = state_mapping(state)
    messages: list[Message] = []
    if system is not None:
        messages.append({"role": "system", "content": _format(system, fields, node, what="the system template")})
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": _format(prompt, fields, node)})
        return messages
    produced = prompt(state)
    if isinstance(produced, str):
        messages.append({"role": "user", "content": produced})
    else:
        messages.extend(dict(m) for m in produced)
    return messages


def _format(template: str, fields: Mapping[str, Any], node: str, *, what: str = "the prompt template") -> str:
    """``template`` filled from the state's fields; a template mistake raises :class:`PromptError`."""
    return format_template(template, fields, node=node, what=what)


async def _collect(stream: AsyncIterator[Any], on_piece: Callable[[str, str], None]) -> dict[str, Any]:
    """A streamed completion's chunks folded into the dump of a whole completion, ``on_piece`` called with each
    piece of text as it arrives (tool calls are assembled from their pieces by index)."""
    completion_id, model, finish, usage = "", None, None, None
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    async for chunk in stream:
        data = chunk.model_dump(mode="json")
        completion_id = data.get("id") or completion_id
        model = data.get("model") or model
        usage = data.get("usage") or usage
        for choice in data.get("choices") or ():
            delta = choice.get("delta") or {}
            piece = delta.get("content")
            if piece:
                text.append(piece)
                on_piece(piece, completion_id)
            for part in delta.get("tool_calls") or ():
                call = calls.setdefault(
                    int(part.get("index") or 0),
                    {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
                )
                call["id"] = part.get("id") or call["id"]
                function = part.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    message = {
        "role": "assistant",
        "content": "".join(text) if text or not calls else None,
        "tool_calls": [calls[i] for i in sorted(calls)] or None,
    }
    return {
        "id": completion_id,
        "model": model,
        "choices": [{"message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _normalize(completion: Mapping[str, Any], model: str, endpoint: str) -> ChatResult:
    """The plain-data :class:`ChatResult` of a chat-completion dump."""
    choices = completion.get("choices") or []
    if not choices:
        raise LLMError(f"model {model!r} at {endpoint} returned no choices", model=model, endpoint=endpoint, status=200)
    raw = choices[0].get("message") or {}
    message: Message = {"role": "assistant", "content": raw.get("content")}
    for call in raw.get("tool_calls") or ():
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            kind = call.get("type") if isinstance(call, Mapping) else type(call).__name__
            raise LLMError(
                f"model {model!r} at {endpoint} returned a tool call of type {kind!r}; only function tool calls are "
                "supported",
                model=model,
                endpoint=endpoint,
                status=200,
            )
    if raw.get("tool_calls"):
        message["tool_calls"] = [
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": call["function"].get("arguments") or "{}"},
            }
            for call in raw["tool_calls"]
        ]
    usage = completion.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    completion_tokens = int(usage.get("completion_tokens") or 0)
    return {
        "id": str(completion.get("id") or ""),
        "model": str(completion.get("model") or model),
        "message": message,
        "finish_reason": choices[0].get("finish_reason"),
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": int(usage.get("total_tokens") or prompt_tokens + completion_tokens),
        },
    }


def _usage(result: Any) -> tuple[int, int]:
    """``(prompt_tokens, completion_tokens)`` of a :class:`ChatResult`, for the audit record."""
    usage = result["usage"]
    return int(usage["prompt_tokens"]), int(usage["completion_tokens"])


def _endpoint(url: str) -> str:
    """``url`` without its query string and user info (which could hold a key)."""
    url = url.split("?", 1)[0]
    return re.sub(r"//[^/@]*@", "//", url)


def _excerpt(value: Any, limit: int = 80) -> str:
    text = " ".join(str(value).split())
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _error_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and error.get("message"):
            return str(error["message"])
    return exc.message
