"""The main demo (``examples/agent_task.py``) as a user runs it: a real subprocess, offline, on a SQLite file.

Checks what it prints (fail at step 3, resume in a new process with 0 model calls for steps 1-2, fork, diff, tokens
per branch), then opens its database with the API and checks the threads it left behind.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from support import REPO

from graphckpt import CheckpointRef

ROOT = REPO
DEMO = ROOT / "examples" / "agent_task.py"

pytestmark = pytest.mark.slow


def _load_demo() -> ModuleType:
    """The demo module, loaded by path and not registered in ``sys.modules``, as ``graphckpt demo`` loads it."""
    spec = importlib.util.spec_from_file_location("agent_task_demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _offline_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GRAPHCKPT_"))}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    db = tmp_path_factory.mktemp("demo") / "agent_demo.db"
    proc = subprocess.run(
        [sys.executable, str(DEMO), "--db", str(db)],
        cwd=tmp_path_factory.getbasetemp(),
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc, db


def _section(out: str, number: int) -> str:
    match = re.search(rf"^{number}\. .*?(?=^\d\. |^Done:|\Z)", out, re.MULTILINE | re.DOTALL)
    assert match, f"section {number} missing from:\n{out}"
    return match.group(0)


def test_demo_exits_cleanly_and_offline(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, db = demo_run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    assert "graphckpt-offline" in proc.stdout
    assert f"database  {db}" in proc.stdout
    assert "Done: thread 'weather' done, thread 'weather-fahrenheit' done" in proc.stdout
    assert not db.with_name(db.name + ".fault").exists()  # the simulated fault was consumed


def test_run_fails_at_step_3_with_its_checkpoint_saved(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run = _section(demo_run[0].stdout, 1)
    assert re.search(r"^ +step 1 +analyse +[\d.]+ ms +\d+ tokens, 1 model call", run, re.MULTILINE)
    assert re.search(r"^ +step 2 +write +[\d.]+ ms +\d+ tokens, 1 model call", run, re.MULTILINE)
    assert re.search(r"^ +step 3 +check +FAILED +TimeoutError: simulated timeout", run, re.MULTILINE)
    assert "thread 'weather' is failed; its checkpoint after step 2 is saved" in run
    assert "next: check" in run
    assert "step 4" not in run


def test_resume_in_a_new_process_reruns_nothing_and_calls_no_model_for_steps_1_2(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    resume = _section(demo_run[0].stdout, 2)
    child_pid = re.search(r"\[pid (\d+)\] opened agent_demo\.db: thread 'weather' is failed at step 2", resume)
    assert child_pid, resume
    assert int(child_pid.group(1)) != os.getpid()
    assert "steps 1-2 (analyse, write) re-executed: no; their new model calls: 0" in resume
    assert "model calls made by this process: 2 (check 1, tests 1)" in resume
    assert not re.search(r"step [12] ", resume)  # no super-step 1 or 2 ran again
    assert re.search(r"^ +step 3 +check +[\d.]+ ms +\d+ tokens, 1 model call", resume, re.MULTILINE)
    assert re.search(r"^ +step 4 +tests +[\d.]+ ms +\d+ tokens, 1 model call", resume, re.MULTILINE)
    assert "thread 'weather' is done at step 4" in resume


def test_fork_diff_and_tokens_are_printed(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    out = demo_run[0].stdout
    fork = _section(out, 3)
    assert "Fork 'weather' after step 2 into 'weather-fahrenheit'" in fork
    assert re.search(r"step 3 +fork .*next: write", fork)
    for step, node in ((4, "write"), (5, "check"), (6, "tests")):
        assert re.search(rf"^ +step {step} +{node} +[\d.]+ ms +\d+ tokens", fork, re.MULTILINE), fork
    assert "thread 'weather-fahrenheit' is done at step 6; model calls: analyse 0, write 1, check 1, tests 1" in fork

    diff = _section(out, 4)
    assert "~ instruction:" in diff and "Fahrenheit" in diff
    assert '"temperature_unit": "fahrenheit"' in diff
    assert '- return {"city": city, "temp_c"' in diff and '+ return {"city": city, "temp_f"' in diff
    assert '["temp_f"] == 21.5' in diff

    tokens = _section(out, 5)
    original = re.search(r"^ +weather +steps 1-4 +4 model calls +(\d+) tokens$", tokens, re.MULTILINE)
    branch = re.search(
        r"^ +weather-fahrenheit +steps 4-6 +3 model calls +(\d+) tokens +"
        r"\(\+ steps 1-2 shared with 'weather': 2 calls, (\d+) tokens, not re-spent\)$",
        tokens,
        re.MULTILINE,
    )
    assert original and branch, tokens
    assert int(original.group(1)) > int(branch.group(2)) > 0


def test_demo_output_is_deterministic_but_for_timings_and_ids(
    demo_run: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    again = subprocess.run(
        [sys.executable, str(DEMO), "--db", str(tmp_path / "agent_demo.db")],
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert again.returncode == 0, again.stderr

    def normalize(out: str) -> str:
        out = re.sub(r" +[\d.]+ ms", " <ms>", out)
        out = re.sub(r"\b[0-9a-f]{24}\b", "<id>", out)
        out = re.sub(r"\[pid \d+\]", "[pid]", out)
        return re.sub(r"/\S*agent_demo\.db", "<db>", out)

    assert normalize(again.stdout) == normalize(demo_run[0].stdout)


def test_database_after_the_demo(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, db = demo_run
    assert proc.returncode == 0, proc.stderr
    demo = _load_demo()
    with demo.build_app(db) as app:
        threads = {t.thread_id: t for t in app.threads()}
        assert {k: t.status for k, t in threads.items()} == {"weather": "done", "weather-fahrenheit": "done"}

        original = app.history("weather")
        assert [s.step for s in original] == [4, 3, 2, 1, 0]
        assert {s.thread_id for s in original} == {"weather"}
        after_step_2 = next(s for s in original if s.step == 2)
        assert after_step_2.next == ("check",)
        assert after_step_2.values.code and not after_step_2.values.review
        head = app.get_state("weather")
        assert head.checkpoint_id == original[0].checkpoint_id
        assert head.values.instruction == demo.INSTRUCTION and "fahrenheit" not in head.values.code

        # the fork's parent is the checkpoint after step 2 of 'weather'
        ref = CheckpointRef("weather", after_step_2.checkpoint_id)
        assert threads["weather-fahrenheit"].forked_from == ref
        branch = app.history("weather-fahrenheit")
        assert [(s.thread_id, s.step) for s in branch] == [("weather-fahrenheit", n) for n in (6, 5, 4, 3)] + [
            ("weather", n) for n in (2, 1, 0)
        ]
        first = branch[3]
        assert first.metadata["source"] == "fork" and first.parent == ref and first.next == ("write",)
        assert branch[4].checkpoint_id == after_step_2.checkpoint_id  # shared ancestors, not copies
        tip = app.get_state("weather-fahrenheit")
        assert tip.values.instruction == demo.FORK_INSTRUCTION and '"temperature_unit": "fahrenheit"' in tip.values.code
        assert tip.values.analysis == head.values.analysis  # step 1 is shared

        # usage metadata: the branch's own checkpoints carry only its own model calls
        calls = sum(u["calls"] for s in branch[:4] for u in s.metadata.get("usage", {}).values())
        assert calls == 3

        # forking (again) and running the branch leaves every checkpoint of 'weather' as it was
        def fingerprint() -> list[tuple[object, ...]]:
            return [
                (s.checkpoint_id, s.step, s.parent, s.status, dict(s.metadata), s.values.model_dump())
                for s in app.history("weather")
            ]

        before = fingerprint()
        app.fork("weather", after_step_2.checkpoint_id, update={"instruction": "make it async"}, new_thread_id="t")
        assert app.resume("t").status == "done"
        assert fingerprint() == before
        assert app.get_state("weather").checkpoint_id == head.checkpoint_id
