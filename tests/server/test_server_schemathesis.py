"""schemathesis against ``/openapi.json`` of the real server: generated requests for every non-streaming operation
(SSE endpoints, the v3 thread stream's events too, never end by design: the stream tests cover them) find no 5xx
and no response that breaks the documented schema. Bounded: a fixed seed, a few examples per operation, one
subprocess timeout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.serving import Served

CLI = "from schemathesis.cli import schemathesis; schemathesis()"
AGENT_PROTOCOL_ONLY = r"/stream(/events)?$|^/agents|^/runs/search$|^/runs/\{run_id\}|/commands$"
"""Left out besides the streams: the Agent Protocol's own operations, which test_agent_protocol_schema.py checks
with the protocol's document."""


@pytest.mark.parametrize("token", [None, "tok-s"], ids=["no-tokens", "with-a-token"])
def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path: Path, token: str | None) -> None:
    env = {"GRAPHCKPT_TOKENS": f"{token}=schema"} if token else None
    server = Served(tmp_path, ["support.server_graphs:counter"], env=env).start()
    auth = ["-H", f"Authorization: Bearer {token}"] if token else []
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                CLI,
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "not_a_server_error,response_schema_conformance,content_type_conformance",
                "--max-examples",
                "8",
                "--seed",
                "7",
                "--exclude-path-regex",
                AGENT_PROTOCOL_ONLY,
                "--request-timeout",
                "20",
                "--no-color",
                "--phases",
                "examples,coverage,fuzzing",
                *auth,
            ],
            capture_output=True,
            text=True,
            timeout=420,
            cwd=tmp_path,
        )
    finally:
        server.kill()
    tail = result.stdout[-6000:]
    assert result.returncode == 0, tail
    assert "failures" not in tail.splitlines()[-1] or " 0 failures" in tail, tail
