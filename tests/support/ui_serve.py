"""``graphckpt serve`` of the UI test world (``support.ui_world``) in a child process, and a plain HTTP client: what
the browser tests of the UI share."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from support import child_env
from support.waiting import wait_for


def http(
    url: str,
    data: dict[str, str] | None = None,
    cookie: str | None = None,
    *,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, Any]:
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    sent = {"Cookie": cookie} if cookie else {}
    if json_body is not None:
        body, sent["Content-Type"] = json.dumps(json_body).encode(), "application/json"
    request = urllib.request.Request(url, data=body, headers={**sent, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


SERVED = (
    "graphckpt.cli.demo:graph",
    "support.ui_world:approval_graph",
    "support.ui_world:gated_graph",
    "support.ui_world:calling_graph",
    "support.ui_world:drafting_graph",
)
PRICES = {"graphckpt-offline": {"input": 1.5, "output": 6.0}}


class Server:
    """``graphckpt serve`` (the ui_world graphs) in a child process on a free port; stopped with SIGKILL by its pid.
    ``env`` is added to its environment (e.g. ``OPENAI_BASE_URL`` of a loopback model server)."""

    def __init__(
        self,
        db: Path,
        port: int,
        tokens: Path | None = None,
        *,
        lease_seconds: float = 1.5,
        graphs: tuple[str, ...] = SERVED,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.db, self.port, self.proc, self.tokens = db, port, None, tokens
        self.lease_seconds, self.graphs, self.args, self.env = lease_seconds, graphs, args, env or {}
        self.base = f"http://127.0.0.1:{port}"

    def start(self) -> None:
        prices = self.db.with_suffix(".prices.json")
        prices.write_text(json.dumps(PRICES))
        env = {
            **child_env(),
            "UI_WORLD_GATES": str(self.db),
            "GRAPHCKPT_PRICES": str(prices),
            "GRAPHCKPT_LEASE_SECONDS": str(self.lease_seconds),
            **self.env,
        }  # a killed server's runs are crashed, so taken over, that soon (a dead owner on this host: at once)
        argv = [
            sys.executable,
            "-m",
            "graphckpt",
            "--db",
            str(self.db),
            "serve",
            *self.graphs,
            "--port",
            str(self.port),
            *self.args,
        ]
        if self.tokens is not None:
            argv += ["--tokens-file", str(self.tokens)]
        with open(self.db.with_suffix(".serve.log"), "ab") as log:  # the child keeps its own copy of the fd
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=self.db.parent)

        def up() -> bool:
            assert self.proc is not None and self.proc.poll() is None, "the server exited"
            try:
                return http(self.base + "/ok")[0] == 200
            except OSError:
                return False

        wait_for(up, 30, what="the UI server to answer")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
