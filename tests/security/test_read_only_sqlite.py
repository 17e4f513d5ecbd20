"""A SQLite database this user may not write: a read-only file, or a file in a read-only directory. Every reading
command (``threads``, ``show``, ``history``, ``diff``, ``export``) and an App's reads work (``mode=ro``, or
``immutable`` when the directory cannot take the WAL's ``-shm`` file); every write, ``graphckpt import`` included,
fails with one clear error and a non-zero exit, and the file is unchanged.

Root ignores file modes, so as root the CLI runs without the capabilities that let it (``setpriv`` drops
``CAP_DAC_OVERRIDE`` and ``CAP_DAC_READ_SEARCH``): the kernel then checks the modes as for any user. (Running it as
``nobody`` is not possible here: the interpreter lives under ``/root``, which is ``0700``.) As another user the
modes apply directly."""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import child_env

from graphckpt import END, START, StateGraph
from graphckpt.errors import SaverError
from graphckpt.savers.sqlite import SqliteSaver
from graphckpt.testing._records import make_checkpoint

ROOT = os.geteuid() == 0
CAPS = "-dac_override,-dac_read_search"


def _bounded(argv: list[str]) -> list[str]:
    """``argv`` run so that file modes bind: without the capabilities that bypass them, when we are root."""
    if not ROOT:
        return argv
    assert shutil.which("setpriv"), "setpriv (util-linux) is needed to run as root without CAP_DAC_OVERRIDE"
    return ["setpriv", f"--bounding-set={CAPS}", f"--inh-caps={CAPS}", *argv]


def cli(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in child_env().items() if not k.startswith("GRAPHCKPT_")}
    env.update(COLUMNS="120", NO_COLOR="1")
    argv = _bounded([sys.executable, "-m", "graphckpt.cli", "--db", str(db), *args])
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, check=False, cwd=db.parent)


def counter_app(db: Path | str) -> Any:
    def step(s: dict[str, Any]) -> dict[str, Any]:
        return {"n": s["n"] + 1}

    from typing import TypedDict

    class S(TypedDict):
        n: int

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(saver=SqliteSaver(db))


def digest(directory: Path) -> dict[str, str]:
    """The files of ``directory`` by content; a ``-shm`` (SQLite's shared-memory index, which a ``mode=ro``
    reader may create beside a read-only file) and an empty ``-wal`` are no change to the data."""
    found = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}
    found.pop("runs.db-shm", None)
    if found.get("runs.db-wal") == hashlib.sha256(b"").hexdigest():
        del found["runs.db-wal"]
    return found


@pytest.fixture
def place() -> Iterator[Path]:
    """A directory every user can enter (``tmp_path`` sits under a root-only one), removed afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="graphckpt-ro-"))
    directory.chmod(0o755)
    try:
        yield directory
    finally:
        for p in [directory, *directory.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        shutil.rmtree(directory, ignore_errors=True)


def build(directory: Path) -> tuple[Path, Path]:
    """A database with threads t1 and t2 (closed: no -wal or -shm left), and beside it an export of a thread t3
    made in another database."""
    db, side = directory / "runs.db", directory / "side.db"
    for path, threads in ((db, {"t1": 0, "t2": 5}), (side, {"t3": 7})):
        app = counter_app(path)
        try:
            for thread_id, n in threads.items():
                app.invoke({"n": n}, thread_id=thread_id)
        finally:
            app.close()
    exported = cli(side, "export", "t3")
    assert exported.returncode == 0, exported.stderr
    dump = directory / "t3.jsonl"
    dump.write_text(exported.stdout)
    side.unlink()
    assert sorted(p.name for p in directory.iterdir()) == ["runs.db", "t3.jsonl"]
    return db, dump


READING = [["threads"], ["threads", "--json"], ["show", "t1"], ["history", "t1"], ["diff", "t1", "t2", "--json"]]


@pytest.mark.parametrize("which", ["file", "directory"])
def test_reading_commands_work_and_writes_fail_clearly(place: Path, which: str) -> None:
    db, dump = build(place)
    if which == "file":
        db.chmod(0o444)
    else:
        place.chmod(0o555)
    before = digest(place)
    for args in READING:
        result = cli(db, *args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert "t1" in cli(db, "threads").stdout and "t2" in cli(db, "threads").stdout
    exported = cli(db, "export", "t1")
    assert exported.returncode == 0 and '"t1"' in exported.stdout, exported.stderr
    imported = cli(db, "import", str(dump))
    assert imported.returncode != 0, (imported.stdout, imported.stderr)
    lines = imported.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphckpt: error: "), imported.stderr
    assert "read-only" in lines[0] and "runs.db" in lines[0] and "nothing can be written" in lines[0], lines[0]
    assert digest(place) == before  # nothing written
    assert "t3" not in cli(db, "threads").stdout


def _in_child(db: Path) -> str:
    """An App's reads and a write, in a child without the capabilities (see the module)."""
    code = f"""
import asyncio, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_read_only_sqlite import app_reads
print(asyncio.run(app_reads({str(db)!r})))
"""
    env = child_env()
    result = subprocess.run(
        _bounded([sys.executable, "-c", code]), capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


async def app_reads(db: str) -> str:
    app = counter_app(db)
    try:
        snap = await app.aget_state("t1")
        threads = sorted(t.thread_id for t in await app.athreads())
        history = [s.step for s in await app.ahistory("t1")]
        saver = SqliteSaver(db)
        await saver.setup(create=False)
        try:
            try:
                await saver.commit(make_checkpoint("t9", 0), expected_head=None, run_id="r")
                written = "written"
            except SaverError as exc:
                written = str(exc)
        finally:
            await saver.aclose()
        try:
            await app.ainvoke({"n": 1}, thread_id="t4")
            invoked = "invoked"
        except SaverError as exc:
            invoked = str(exc)
        return repr((snap.values["n"], threads, history, written, invoked))
    finally:
        await app.aclose()


@pytest.mark.parametrize("which", ["file", "directory"])
def test_an_app_reads_a_read_only_database_and_refuses_writes(place: Path, which: str) -> None:
    db, _ = build(place)
    if which == "file":
        db.chmod(0o444)
    else:
        place.chmod(0o555)
    before = digest(place)
    n, threads, history, written, invoked = ast.literal_eval(_in_child(db))
    assert (n, threads) == (1, ["t1", "t2"]) and history[0] == 1
    for error in (written, invoked):
        assert "is open read-only" in error and "nothing can be written" in error, error
        assert ("file is read-only" if which == "file" else "directory is read-only") in error
    assert digest(place) == before


def test_the_same_files_writable_are_written(place: Path) -> None:
    """The control: with the modes left as they are, the same import succeeds."""
    db, dump = build(place)
    imported = cli(db, "import", str(dump))
    assert imported.returncode == 0, imported.stderr
    assert "t3" in cli(db, "threads").stdout
    assert stat.S_IMODE(place.stat().st_mode) == 0o755
