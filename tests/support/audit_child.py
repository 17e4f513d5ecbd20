"""Child process for ``test_audit_crash.py`` (and :class:`Proc`, which starts it): a three-step agent (model call
with a tool, the tool, model call) on a SQLite file, against the loopback OpenAI-compatible server named by
``OPENAI_BASE_URL``.

``python tests/support/audit_child.py DB THREAD`` runs the thread (``invoke`` if it does not exist, else ``resume``) and
prints ``commit <step>`` after each checkpoint and ``done <status>`` at the end. With ``AUDIT_KILL=tool`` the tool
prints ``in-tool <idempotency key>`` and then blocks (at most 60 s) so the parent can SIGKILL the process inside the
call (with ``AUDIT_FAIL=tool`` it raises ``ConnectionError``: the thread fails); a kill inside a model call needs
nothing here (the parent holds the server's answer back and kills meanwhile).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from graphckpt import END, START, StateGraph, ThreadNotFoundError, current_context
from graphckpt.audit import describe_call
from graphckpt.savers.sqlite import SqliteSaver
from nodes import ChatModel, chat_node, tool, tool_node
from support import child_env
from support.leasing import wait_unleased


class Agent(BaseModel):
    request: str = "weather in Oslo"
    plan: str = ""
    tool_calls: list[dict[str, Any]] = []
    tool_results: list[dict[str, Any]] = []
    final: str = ""


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@tool
def lookup(city: str) -> dict[str, Any]:
    """The temperature in a city."""
    if os.environ.get("AUDIT_FAIL") == "tool":
        raise ConnectionError("weather service unreachable")
    if os.environ.get("AUDIT_KILL") == "tool":
        say(f"in-tool {current_context().idempotency_key}")
        time.sleep(60)  # the parent SIGKILLs us here
    return {"city": city, "celsius": 3}


def build_graph() -> StateGraph:
    g = StateGraph(Agent)
    g.add_node("plan", chat_node("{request}", output_key="plan", tools=[lookup], model="fake-model", timeout=30))
    g.add_node("tools", tool_node([lookup]))
    g.add_node("reply", chat_node(lambda s: f"summarise {s.tool_results}", output_key="final", model="fake-model"))
    g.add_edge(START, "plan")
    g.add_edge("plan", "tools")
    g.add_edge("tools", "reply")
    g.add_edge("reply", END)
    return g


def build_agent_graph() -> StateGraph:
    """``plan`` (a model call), ``act`` (a model call then a tool call, in one task: after a kill inside the tool the
    resumed task replays the model call from the journal), ``reply`` (a model call)."""
    model = ChatModel(model="fake-model", timeout=30)

    async def act(state: Agent, ctx: Any) -> dict[str, Any]:
        answer = await model.acall(ctx, [{"role": "user", "content": f"act on {state.plan}"}])
        run = describe_call(lambda: lookup.fn(city="Oslo"), "execute_tool lookup", arguments={"city": "Oslo"})
        found = await ctx.aeffect(run)
        return {"tool_results": [{"name": "lookup", "output": found, "note": answer["message"]["content"]}]}

    g = StateGraph(Agent)
    g.add_node("plan", chat_node("{request}", output_key="plan", model=model))
    g.add_node("act", act)
    g.add_node("reply", chat_node(lambda s: f"summarise {s.tool_results}", output_key="final", model=model))
    g.add_edge(START, "plan")
    g.add_edge("plan", "act")
    g.add_edge("act", "reply")
    g.add_edge("reply", END)
    return g


def span_record(span: Any) -> dict[str, Any]:
    """A finished SDK span as JSON data (what ``AUDIT_OTEL`` writes, one line per span)."""
    ctx, parent = span.get_span_context(), span.parent
    return {
        "name": span.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent": format(parent.span_id, "016x") if parent is not None else None,
        "attributes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()},
        "links": [format(link.context.trace_id, "032x") for link in span.links],
    }


def enable_file_telemetry(path: str) -> None:
    """Export every span to ``path`` as it ends (JSON lines, fsynced): what a process killed later has sent."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    import graphckpt.telemetry

    class FileExporter(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            with open(path, "a", encoding="utf-8") as f:
                for span in spans:
                    f.write(json.dumps(span_record(span)) + "\n")
                f.flush()
                os.fsync(f.fileno())
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter()))
    graphckpt.telemetry.enable(tracer_provider=provider)


def main(db: str, thread: str) -> int:
    os.environ.setdefault("GRAPHCKPT_LEASE_SECONDS", "0.5")  # a killed child's thread is crashed that soon
    if os.environ.get("AUDIT_OTEL"):
        enable_file_telemetry(os.environ["AUDIT_OTEL"])
    graph = build_agent_graph() if os.environ.get("AUDIT_GRAPH") == "agent" else build_graph()
    return run_or_resume(graph, db, thread)


def run_or_resume(graph: Any, db: str, thread: str) -> int:
    """Start ``thread`` on the SQLite file ``db``, or resume it (once a killed owner's lease is gone), saying each
    commit and the end on stdout for the parent test to read."""
    app = graph.compile(saver=SqliteSaver(db))
    try:
        try:
            app.get_state(thread)
            wait_unleased(app, thread)
            stream = app.stream(None, thread_id=thread, mode="checkpoints", resume=True)
        except ThreadNotFoundError:
            stream = app.stream({}, thread_id=thread, mode="checkpoints")
        for snap in stream:
            say(f"commit {snap.step}")
        say(f"done {app.get_state(thread).status}")
    finally:
        app.close()
    return 0


CHILD = Path(__file__)


class Proc:
    """The child with its stdout lines in a queue; every wait is bounded."""

    def __init__(self, db: Path, thread: str, env: dict[str, str], child: Path = CHILD) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(child), str(db), thread],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=child_env(**env),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.out: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line within {timeout} s: {self.out}") from None
            if line is None:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"child ended without {prefix!r}: {self.out} {err[-2000:]}")
            self.out.append(line)
            if line.startswith(prefix):
                return line

    def finish(self, timeout: float = 60.0) -> int:
        """Read the rest of the output and return the exit code (bounded)."""
        deadline = time.monotonic() + timeout
        while (line := self.lines.get(timeout=max(0.01, deadline - time.monotonic()))) is not None:
            self.out.append(line)
        return self.proc.wait(max(0.01, deadline - time.monotonic()))

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
