"""The public surface: a flat, sorted ``__all__``; light imports; a rooted error tree."""

from __future__ import annotations

import subprocess
import sys

import graphckpt
from graphckpt import errors


def test_all_is_sorted_and_complete() -> None:
    assert graphckpt.__all__ == sorted(graphckpt.__all__)
    public = {n for n in dir(graphckpt) if not n.startswith("_") and not isinstance(getattr(graphckpt, n), type(sys))}
    assert public - {"annotations"} == set(graphckpt.__all__)


def test_every_error_has_the_root() -> None:
    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.GraphckptError)
    assert issubclass(errors.CheckpointNotFoundError, LookupError)
    assert issubclass(errors.GraphSetupError, ValueError)


def test_import_needs_only_the_core() -> None:
    code = (
        "import sys, graphckpt\n"
        "heavy = [m for m in ('networkx', 'psycopg', 'openai', 'rich', 'aiosqlite') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
