"""A real HTTP server on loopback that speaks the OpenAI chat-completions protocol, for tests and benchmarks.

It serves ``POST /v1/chat/completions`` from a script of replies, one per request, and records every request
(headers and JSON body), so tests can count calls on the server side::

    with FakeOpenAIServer() as server:
        server.script(error(429, headers={"Retry-After": "1"}), completion("hi"))
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="test-key", max_retries=0)
        ...
        assert server.request_count == 2

When the script is empty it answers every request with a deterministic completion (``echo: <last user message>``).
A request with ``"stream": true`` gets its completion as server-sent events, as OpenAI streams it: one
``chat.completion.chunk`` per word of the content (written and flushed one by one, chunked transfer encoding), one
with the tool calls, one with the finish reason, one with the usage when ``stream_options.include_usage`` asks, then
``data: [DONE]``. A :func:`held` reply stops after its first chunk until ``release`` is set.
A :func:`slow` reply blocks its handler on :attr:`FakeOpenAIServer.release` (a ``threading.Event``) for at most
``max_wait`` seconds, so a client timeout can be provoked without sleeping; closing the server sets the event.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = [
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "completion",
    "error",
    "held",
    "html_page",
    "slow",
    "stream_events",
]


@dataclass
class Reply:
    """One scripted response."""

    status: int = 200
    body: Any = None
    """JSON body; ``None`` for a 200 means "build a completion from the request"."""
    headers: Mapping[str, str] = field(default_factory=dict)
    wait_for_release: float = 0.0
    """If > 0, block on the server's ``release`` event for at most this many seconds before answering."""
    raw: bytes | None = None
    """Sent as the body instead of ``body`` as JSON (with ``headers`` naming its ``Content-Type``)."""
    hold_after_first: float = 0.0
    """Streamed: after the first chunk, wait on the server's ``release`` event for at most this many seconds."""


@dataclass
class RecordedRequest:
    """A request the server received."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    json: Any


def completion(
    content: str | None = "ok",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    model: str = "fake-model",
    prompt_tokens: int = 7,
    completion_tokens: int = 3,
    finish_reason: str | None = None,
) -> Reply:
    """A 200 chat completion with the given content, tool calls and usage."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "tool_calls": tool_calls}
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }
    return Reply(200, body)


def error(status: int, message: str = "scripted error", *, headers: Mapping[str, str] | None = None) -> Reply:
    """An error response in OpenAI's format: ``{"error": {"message", "type", "code"}}``."""
    body = {"error": {"message": message, "type": "fake_error", "param": None, "code": str(status)}}
    return Reply(status, body, dict(headers or {}))


def html_page(status: int = 200, text: str = "<html><body>Welcome to nginx!</body></html>") -> Reply:
    """An HTML page instead of an API answer, as a base URL that is not the API (a web server, a proxy) sends."""
    return Reply(status, headers={"Content-Type": "text/html; charset=utf-8"}, raw=text.encode())


def slow(reply: Reply | None = None, *, max_wait: float = 10.0) -> Reply:
    """``reply`` (default: a completion), sent only once ``release`` is set or ``max_wait`` seconds have passed."""
    base = reply or completion("slow answer")
    return Reply(base.status, base.body, base.headers, wait_for_release=max_wait, raw=base.raw)


def held(reply: Reply | None = None, *, max_wait: float = 10.0) -> Reply:
    """``reply`` (default: a completion) that, when streamed, stops after its first chunk until ``release`` is set."""
    base = reply or completion("one two three")
    return Reply(base.status, base.body, base.headers, raw=base.raw, hold_after_first=max_wait)


def stream_events(body: Mapping[str, Any], *, include_usage: bool) -> list[bytes]:
    """The server-sent events that stream the completion ``body``."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}] if delta or finish else []
        return f"data: {json.dumps({**base, 'choices': choices, **extra})}\n\n".encode()

    events = [event({"role": "assistant", "content": ""})]
    events += [event({"content": piece}) for piece in re.findall(r"\s*\S+\s*", message.get("content") or "")]
    calls = message.get("tool_calls") or []
    if calls:
        events.append(event({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}))
    events.append(event({}, choice["finish_reason"]))
    if include_usage:
        events.append(event({}, None, usage=body["usage"]))
    return [*events, b"data: [DONE]\n\n"]


class FakeOpenAIServer:
    """The server; a context manager that starts it on a free port of 127.0.0.1 in a background thread."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.billed: list[tuple[str | None, int, int]] = []
        """``(Idempotency-Key header, prompt_tokens, completion_tokens)`` of every completion the server produced,
        billed when it is produced (before a :func:`slow` reply waits): what a provider charges, read or not."""
        self.log: list[tuple[str | None, int, tuple[int, int] | None]] = []
        """Every request, in the order it came: ``(Idempotency-Key, HTTP status, (prompt, completion) billed or
        None)`` (a 5xx bills nothing; a completion is billed even when the client hung up before reading it)."""
        self.release = threading.Event()
        """Set to let blocked :func:`slow` handlers answer."""
        self.latency = 0.0
        """Seconds every request takes after it is billed (a model's think time: a client killed meanwhile loses
        a call the server already counted)."""
        self._script: list[Reply] = []
        self._lock = threading.Lock()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._serve, name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        """The ``base_url`` for an OpenAI client, e.g. ``http://127.0.0.1:54321/v1``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def request_count(self) -> int:
        """How many requests reached the server."""
        with self._lock:
            return len(self.requests)

    @property
    def billed_tokens(self) -> int:
        """Prompt plus completion tokens of every billed completion."""
        with self._lock:
            return sum(p + c for _, p, c in self.billed)

    def script(self, *replies: Reply) -> None:
        """Queue replies; each request takes the next one (an empty queue means a default completion)."""
        with self._lock:
            self._script.extend(replies)

    def _serve(self) -> None:
        self._httpd.serve_forever(poll_interval=0.01)

    def start(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Release slow handlers, stop serving and close the socket."""
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _next(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            return self._script.pop(0) if self._script else Reply()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeOpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (the timeout test) is expected; stay quiet instead of printing a traceback."""


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """No access log on stderr."""

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = None
        request = RecordedRequest("POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        owner = self.server.owner
        reply = owner._next(request)
        if self.path.rstrip("/") != "/v1/chat/completions":
            reply = error(404, f"no route for {self.path}")
        payload = reply.body if reply.body is not None else _echo(body).body
        usage = payload.get("usage") if reply.status == 200 and isinstance(payload, dict) else None
        key = request.headers.get("idempotency-key")
        with owner._lock:
            if isinstance(usage, dict):
                owner.billed.append((key, usage["prompt_tokens"], usage["completion_tokens"]))
            tokens = (usage["prompt_tokens"], usage["completion_tokens"]) if isinstance(usage, dict) else None
            owner.log.append((key, reply.status, tokens))
        if reply.wait_for_release:
            owner.release.wait(reply.wait_for_release)
        if owner.latency:
            owner.release.wait(owner.latency)  # the think time; closing the server cuts it short
        if isinstance(body, dict) and body.get("stream") and reply.status == 200 and reply.raw is None:
            self._stream(payload, body, reply)
            return
        data = reply.raw if reply.raw is not None else json.dumps(payload).encode()
        self.send_response(reply.status)
        if not any(name.lower() == "content-type" for name in reply.headers):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", f"req-{len(owner.requests)}")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, payload: Any, body: dict[str, Any], reply: Reply) -> None:
        options = body.get("stream_options") or {}
        events = stream_events(payload, include_usage=bool(options.get("include_usage")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", f"req-{len(self.server.owner.requests)}")
        self.end_headers()
        for i, data in enumerate(events):
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
            if i == 1 and reply.hold_after_first:
                self.server.owner.release.wait(reply.hold_after_first)
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _echo(body: Any) -> Reply:
    """The default answer: echo the last user message; usage counted in whitespace tokens."""
    messages = body.get("messages", []) if isinstance(body, dict) else []
    users = [str(m.get("content") or "") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    text = f"echo: {users[-1] if users else ''}"
    prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))
    model = str(body.get("model", "fake-model")) if isinstance(body, dict) else "fake-model"
    return completion(text, model=model, prompt_tokens=prompt_tokens, completion_tokens=len(text.split()))
