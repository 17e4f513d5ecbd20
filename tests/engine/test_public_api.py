"""The public surface: a flat, sorted ``__all__``; light imports; a rooted error tree."""

from __future__ import annotations

import subprocess
import sys

import pytest

import graphckpt
from graphckpt import errors


def test_all_is_sorted_and_complete() -> None:
    assert graphckpt.__all__ == sorted(graphckpt.__all__)
    public = {n for n in dir(graphckpt) if not n.startswith("_") and not isinstance(getattr(graphckpt, n), type(sys))}
    assert public - {"annotations"} == set(graphckpt.__all__)


def test_every_error_has_the_root() -> None:
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, errors.GraphckptWarning if issubclass(cls, Warning) else errors.GraphckptError)
    assert issubclass(errors.GraphckptWarning, UserWarning)
    assert issubclass(errors.CheckpointNotFoundError, LookupError)
    assert issubclass(errors.GraphSetupError, ValueError)


def test_import_needs_only_the_core() -> None:
    """``import graphckpt`` works when the extras are not installed, and pulls in nothing heavy."""
    code = (
        "import sys\n"
        "for absent in ('psycopg', 'psycopg_pool', 'openai', 'rich', 'hypothesis', 'langgraph', 'cryptography'):\n"
        "    sys.modules[absent] = None  # makes `import absent` raise ImportError, as if not installed\n"
        "import graphckpt\n"
        "from graphckpt.savers.memory import MemorySaver\n"
        "heavy = [m for m in ('networkx', 'aiosqlite') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_core_runs_a_graph_without_the_extras() -> None:
    code = (
        "import sys\n"
        "for absent in ('psycopg', 'psycopg_pool', 'openai', 'rich'):\n"
        "    sys.modules[absent] = None\n"
        "from typing import TypedDict\n"
        "from graphckpt import StateGraph, START, END\n"
        "from graphckpt.savers.sqlite import SqliteSaver\n"
        "class S(TypedDict):\n"
        "    n: int\n"
        "g = StateGraph(S)\n"
        "g.add_node('inc', lambda s: {'n': s['n'] + 1})\n"
        "g.add_edge(START, 'inc')\n"
        "g.add_edge('inc', END)\n"
        "app = g.compile(saver=SqliteSaver(':memory:'))\n"
        "print(app.invoke({'n': 1}, thread_id='t').values['n'])\n"
        "app.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "2"


@pytest.mark.parametrize("absent", ["psycopg", "zstandard"])
def test_postgres_saver_without_its_extra_names_the_extra(absent: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{absent!r}] = None\n"
        "try:\n"
        "    from graphckpt.savers.postgres import PostgresSaver\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'graphckpt[postgres]'" in out.stdout and absent in out.stdout, out.stdout
