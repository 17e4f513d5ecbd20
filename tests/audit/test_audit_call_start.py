"""A model call's start marker is written when its request is ready: after the ``openai`` import, the client and the
request's arguments. A call that fails before (here: ``openai`` cannot be imported) was never made and is not recorded
as started; a process's first call does not count the import in its recorded duration (here: an import made 1.5 s
slow by a ``sitecustomize`` in the child's path)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import child_env
from support.openai_server import FakeOpenAIServer

from graphckpt.reader import RawReader
from graphckpt.savers.sqlite import SqliteSaver

pytestmark = pytest.mark.slow

CHILD = """
import sys
from pydantic import BaseModel
from graphckpt import END, START, StateGraph
from graphckpt.reader import RawReader
from graphckpt.savers.sqlite import SqliteSaver
from nodes import chat_node

class Q(BaseModel):
    question: str = "why"
    answer: str = ""

g = StateGraph(Q)
g.add_node("ask", chat_node("{question}", output_key="answer", model="fake-model"))
g.add_edge(START, "ask")
g.add_edge("ask", END)
app = g.compile(saver=SqliteSaver(sys.argv[1]))
try:
    print(app.invoke({}, thread_id="q").values.answer)
finally:
    app.close()
"""

SLOW_IMPORT = """
import importlib.abc, sys, time

class SlowOpenAI(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "openai":
            time.sleep(1.5)  # what a cold import of openai costs on a slow disk
        return None

sys.meta_path.insert(0, SlowOpenAI())
"""


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as s:
        yield s


def audit(db: Path) -> dict[str, Any]:
    with RawReader(SqliteSaver(db)) as reader:
        return reader.audit("q")


def run_child(db: Path, server: FakeOpenAIServer, path: Path) -> subprocess.CompletedProcess[str]:
    env = child_env(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="k", GRAPHCKPT_OFFLINE="0")
    env["PYTHONPATH"] = f"{path}:{env.get('PYTHONPATH', '')}"
    return subprocess.run([sys.executable, "-c", CHILD, str(db)], capture_output=True, text=True, timeout=120, env=env)


def test_the_duration_of_a_first_call_leaves_the_import_out(tmp_path: Path, server: FakeOpenAIServer) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_IMPORT)
    db = tmp_path / "slow.db"
    done = run_child(db, server, site)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("echo: why")
    record = audit(db)
    (call,) = record["calls"]
    assert call["status"] == "finished" and server.request_count == 1
    assert call["ms"] < 1000, call  # the 1.5 s import happened before the start marker


def test_a_call_that_fails_before_its_request_is_not_started(tmp_path: Path, server: FakeOpenAIServer) -> None:
    broken = tmp_path / "broken"
    (broken / "openai").mkdir(parents=True)
    (broken / "openai" / "__init__.py").write_text("raise ImportError('openai is broken here')\n")
    db = tmp_path / "broken.db"
    done = run_child(db, server, broken)
    assert done.returncode != 0 and "openai is broken here" in done.stderr
    record = audit(db)
    assert record["status"] == "failed" and server.request_count == 0
    assert record["calls"] == []  # never reached the server: no started call, hence no lost one
    assert [a["type"] for a in record["attempts"]] == ["ImportError"]
