"""The real server for tests: ``graphckpt serve`` in a subprocess on a free loopback port, stopped by its pid.

    server = Served(tmp_path, ["support.server_graphs:counter"]).start()
    ... httpx against server.url ...
    server.stop()          # SIGTERM, then waits; kill() is SIGKILL

Waits are :func:`support.waiting.wait_for` (a condition polled up to a timeout), never bare sleeps. The child gets
``tests/`` on its ``PYTHONPATH`` (:func:`support.child_env`), so ``support.server_graphs:...`` imports there.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from support import child_env
from support.waiting import wait_for

__all__ = ["Served", "free_port", "read_events"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    def __init__(
        self,
        tmp_path: Path,
        targets: Sequence[str],
        *,
        db: str | None = None,
        env: Mapping[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.tmp_path = tmp_path
        self.targets = list(targets)
        self.db = db or str(tmp_path / "serve.db")
        self.args = list(args)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPHCKPT_", "OPENAI_"))}
        self.env = child_env(base=base, **(env or {}))
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tmp_path / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0, *, port: int | None = None) -> Served:
        """Start the server on ``port`` (a restart on the port it had, so its clients find it again) or a free one."""
        self.port = port or free_port()
        argv = [
            sys.executable,
            "-m",
            "graphckpt",
            "--db",
            self.db,
            "serve",
            *self.targets,
            "--port",
            str(self.port),
            *self.args,
        ]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.tmp_path)

        def ready() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                return httpx.get(f"{self.url}/ok", timeout=1.0).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, timeout, interval=0.05, what="the server's /ok")
        return self

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signum)

    def kill(self) -> None:
        """SIGKILL: no shutdown at all."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for the exit; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"server did not exit within {timeout}s of SIGTERM") from None
        return int(self.proc.returncode)


def read_events(
    client: httpx.Client,
    path: str,
    *,
    last_id: str | None = None,
    limit: int | None = None,
    method: str = "GET",
    json_body: Any = None,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    on_response: Callable[[httpx.Response], None] | None = None,
) -> list[tuple[str | None, str, Any]]:
    """``(id, event, data)`` of each SSE event until the stream ends (or until ``limit`` events with an id were
    read: then the connection is dropped). ``id`` is the event's own ``id:`` field (``None`` without one; unlike an
    ``EventSource``, which keeps the last one). ``on_response`` sees the response (its headers) first."""
    sent = {**(headers or {}), **({"Last-Event-ID": last_id} if last_id else {})}
    out: list[tuple[str | None, str, Any]] = []
    with client.stream(method, path, headers=sent, json=json_body, params=params) as response:
        if response.status_code != 200:
            response.read()
            raise AssertionError(f"{method} {path}: {response.status_code} {response.text}")
        if on_response is not None:
            on_response(response)
        frames = SseFrames()
        for line in response.iter_lines():
            if (event := frames.feed(line)) is not None:
                out.append(event)
                if limit is not None and sum(1 for i, _, _ in out if i) >= limit:
                    break
    return out


class SseFrames:
    """SSE lines in, ``(id, event, data as JSON)`` out: :meth:`feed` returns an event at the blank line that ends
    it (comments, the keep-alives, are skipped)."""

    def __init__(self) -> None:
        self.fields: dict[str, str] = {}

    def feed(self, line: str) -> tuple[str | None, str, Any] | None:
        if line.startswith(":"):
            return None
        if line:
            name, _, value = line.partition(":")
            self.fields[name] = value.removeprefix(" ")
            return None
        if not self.fields:
            return None
        fields, self.fields = self.fields, {}
        data = fields.get("data")
        return fields.get("id"), fields.get("event", "message"), json.loads(data) if data else None


def durable(events: list[tuple[str | None, str, Any]]) -> list[tuple[str | None, str, Any]]:
    """The events with an id (what a reconnect must continue exactly)."""
    return [e for e in events if e[0]]
