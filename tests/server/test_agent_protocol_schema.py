"""schemathesis against ``graphckpt serve`` with the Agent Protocol's own published document
(``tests/server/agent_protocol/openapi.json``, version 0.1.6): generated requests for every operation but the streams
(an SSE stream or the WebSocket never ends by design: ``test_agent_protocol.py`` covers them) find no 5xx, no
undocumented status and no response that breaks the document's schemas. Bounded: a fixed seed, a few examples per
operation, one subprocess timeout.

Deliberate differences (docs/coming-from-langgraph.md, "Agent Protocol"): ``POST /store/namespaces`` answers
langgraph-sdk's ``{"namespaces": [...]}`` (the two clients send the same body, and the sdk's shape wins), so its
response is not checked here; a body that is not JSON is a 400 (the document lists 422 only), so the status codes are
not checked against the document's lists (every refusal is still a documented-shape JSON error, never a 5xx);
checkpoint ids are graphckpt's (24 hex digits, sorted by time), not UUIDs, so ``get_thread_history`` (whose
``checkpoint_id`` the document types ``uuid``) is checked in ``test_agent_protocol.py`` instead, format aside."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.serving import Served

CLI = "from schemathesis.cli import schemathesis; schemathesis()"
DOCUMENT = Path(__file__).parent / "agent_protocol" / "openapi.json"


def test_the_document_is_the_published_agent_protocol() -> None:
    doc = json.loads(DOCUMENT.read_text())
    operations = [(m, p) for p, ops in doc["paths"].items() for m in ops]
    assert doc["info"] == {"title": "Agent Protocol", "version": "0.1.6"} and len(operations) == 27


@pytest.mark.slow  # about 35 s alone (53 s on a loaded machine): the acceptance check with the protocol's document
def test_schemathesis_with_the_agent_protocol_document_finds_no_violation(tmp_path: Path) -> None:
    server = Served(tmp_path, ["agent=support.server_graphs:echo"]).start()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                CLI,
                "run",
                str(DOCUMENT),
                "--url",
                server.url,
                "--checks",
                "not_a_server_error,response_schema_conformance,content_type_conformance",
                "--max-examples",
                "3",
                "--seed",
                "7",
                "--exclude-path-regex",
                "/stream$",
                "--exclude-operation-id",
                "list_namespaces",
                "--exclude-operation-id",
                "get_thread_history",
                "--request-timeout",
                "20",
                "--no-color",
                "--phases",
                "examples,coverage,fuzzing",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
    finally:
        server.kill()
    tail = result.stdout[-8000:]
    assert result.returncode == 0, tail
    assert " 0 failures" in tail or "failures" not in tail.splitlines()[-1], tail
