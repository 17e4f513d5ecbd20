"""Shared helpers of the test suite, imported as ``from support.<module> import <name>``.

``tests/`` is on ``sys.path`` (``pythonpath`` in pyproject.toml's pytest section), so ``support`` is a package there;
a child process gets the same through :func:`child_env`, which puts ``tests/`` first on its ``PYTHONPATH`` (then
``support.server_graphs:counter`` and the like import in it, as they do in the test).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DATA", "REPO", "SUPPORT", "TESTS", "child_env"]

SUPPORT = Path(__file__).resolve().parent
TESTS = SUPPORT.parent
REPO = TESTS.parent
DATA = TESTS / "data"


def child_env(*first: str | Path, base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment for a child process: ``base`` (default ``os.environ``) with ``first`` (e.g. a ``tmp_path``
    holding a user's module), then ``tests/``, then the inherited ``PYTHONPATH`` (e.g. a checkout under test) on its
    ``PYTHONPATH``, and ``extra`` set."""
    env = dict(os.environ if base is None else base)
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, first), str(TESTS), *inherited])
    env.update(extra)
    return env
