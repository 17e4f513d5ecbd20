"""The offline model (``nodes.offline``) and what it costs: no endpoint, no key, and no ``openai`` import.

The mechanism is generic: a chat node's ``offline_answer`` (a function of the messages) says what the model answers;
:func:`nodes.scripted` builds one from rules. The demo's canned weather answers are demo content and live in
``examples/demo_answers.py``; they are checked here through the demo's own module.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pydantic
import pytest
from support import REPO
from support.fake_context import FakeContext

from nodes import OFFLINE_MODEL, chat_node, llm_calls, offline_completion, scripted

ROOT = REPO


class Task(pydantic.BaseModel):
    request: str = "write a weather lookup function"
    answer: str | None = None


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GRAPHCKPT_MODEL", "GRAPHCKPT_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter with no model endpoint configured (PYTHONPATH is inherited)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GRAPHCKPT_"))}
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_import_nodes_does_not_import_openai() -> None:
    proc = _python("import nodes", "-X", "importtime")
    assert proc.returncode == 0, proc.stderr
    imported = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "nodes.llm" in imported  # the chat node's module was imported ...
    assert not [name for name in imported if name.split(".")[0] == "openai"]  # ... without the openai package
    assert "nodes.human" not in imported  # its pydantic model is built on first use of an approval name


def test_approval_names_are_imported_on_first_use() -> None:
    proc = _python(
        """
        import sys
        import nodes
        before = "nodes.human" in sys.modules
        from nodes import Approval, approval_node
        print(before, Approval.__module__, approval_node is nodes.human.approval_node, "parse_approval" in dir(nodes))
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "nodes.human", "True", "True"]


def test_offline_chat_graph_runs_without_openai(tmp_path: Path) -> None:
    code = f"""
        import sys
        from pydantic import BaseModel
        from graphckpt import END, START, StateGraph
        from graphckpt.savers.sqlite import SqliteSaver
        from nodes import chat_node, llm_calls

        class S(BaseModel):
            request: str
            answer: str = ""

        g = StateGraph(S)
        g.add_node("ask", chat_node("Request: {{request}}", output_key="answer"))
        g.add_edge(START, "ask")
        g.add_edge("ask", END)
        with g.compile(saver=SqliteSaver({str(tmp_path / "runs.db")!r})) as app:
            out = app.invoke({{"request": "say hi"}}, thread_id="t1")
        print(llm_calls.calls, out.values.answer)
        print("openai" in sys.modules)
    """
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr
    first, loaded = proc.stdout.splitlines()
    assert first.startswith(f"1 [{OFFLINE_MODEL} #") and "Noted: say hi." in first
    assert loaded == "False"


async def test_default_offline_answer_is_deterministic() -> None:
    node = chat_node("Request: {request}", output_key="answer", system="Write the code.")
    before = llm_calls.calls
    first, second = FakeContext(), FakeContext()
    a, b = await node(Task(), first), await node(Task(), second)
    assert a == b
    assert a["answer"].startswith(f"[{OFFLINE_MODEL} #") and "Noted: write a weather lookup function." in a["answer"]
    assert first.usage == second.usage
    model, prompt_tokens, completion_tokens = first.usage[0]
    assert (model, prompt_tokens) == (OFFLINE_MODEL, 9)
    assert completion_tokens == len(a["answer"].split())
    assert llm_calls.calls - before == 2
    other = await node(Task(request="something else"), FakeContext())
    assert other != a  # a changed prompt changes the answer (its digest at least)


async def test_scripted_answers_match_system_then_user_messages() -> None:
    model = scripted(
        [("review", "Verdict: ok"), ("weather", lambda messages: f"{len(messages)} message(s) about weather")],
        default=lambda messages: "no rule matched",
    )

    async def ask(system: str, request: str) -> Any:
        node = chat_node("Request: {request}", output_key="answer", system=system, offline_answer=model)
        return (await node(Task(request=request), FakeContext()))["answer"]

    assert await ask("Review the code.", "weather") == "Verdict: ok"  # the system prompt is tried first
    assert await ask("Write it.", "the WEATHER in Oslo") == "2 message(s) about weather"
    assert await ask("Write it.", "a sorting function") == "no rule matched"


def test_offline_answer_must_be_text() -> None:
    with pytest.raises(TypeError, match="must return str, got int"):
        offline_completion([{"role": "user", "content": "hi"}], lambda messages: 42)  # type: ignore[arg-type,return-value]


def _demo_answers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("demo_answers_under_test", ROOT / "examples" / "demo_answers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("system", "expected"),
    [
        ("Analyse the request.", "Analysis of: write a weather lookup function"),
        ("Write the code.", "def get_weather(city: str"),
        ("Check the code for errors.", "Verdict:"),
        ("Write unit tests for the code.", "def test_unknown_city_raises_lookup_error"),
    ],
)
async def test_demo_answers_each_demo_step(system: str, expected: str) -> None:
    node = chat_node(
        "Request: {request}", output_key="answer", system=system, offline_answer=_demo_answers().demo_answer
    )
    update = await node(Task(), FakeContext())
    assert expected in update["answer"] and OFFLINE_MODEL in update["answer"]


async def test_demo_answers_follow_the_request() -> None:
    answer = _demo_answers().demo_answer
    node = chat_node("Request: {request}", output_key="answer", system="Write the code.", offline_answer=answer)
    plain = await node(Task(), FakeContext())
    again = await node(Task(), FakeContext())
    other = await node(Task(request="write a weather lookup function, async, in fahrenheit"), FakeContext())
    assert plain == again and "async def get_weather" not in plain["answer"]
    assert "async def get_weather" in other["answer"] and "temp_f" in other["answer"]
