"""The JavaScript side of the tests: ``tests/js`` is an npm project (package.json and its committed
package-lock.json: LangGraph's JavaScript client ``@langchain/langgraph-sdk``, react, react-dom, esbuild) that
``.ci/run`` installs with ``npm ci``. Tests that need it call :func:`require_node_modules`, which fails under CI
(``CI`` set: the install must have happened) and skips elsewhere, as :func:`support.postgres.require_postgres` does.

    cd tests/js && npm ci          # once, offline afterwards
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from support import TESTS

__all__ = ["JS", "NODE_MODULES", "node", "require_node_modules"]

JS = TESTS / "js"
NODE_MODULES = JS / "node_modules"


def node() -> str:
    """The ``node`` executable (fails under CI, skips elsewhere, when there is none)."""
    found = shutil.which("node")
    if found is None:
        _missing("node is not on PATH")
    assert found is not None
    return found


def require_node_modules(*packages: str) -> Path:
    """``tests/js/node_modules`` holding ``packages`` (default: the sdk), or fail under CI / skip elsewhere."""
    node()
    for package in packages or ("@langchain/langgraph-sdk",):
        if not (NODE_MODULES / package / "package.json").exists():
            _missing(f"tests/js/node_modules/{package} is missing: run `npm ci` in tests/js")
    return NODE_MODULES


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI is set: .ci/run installs it)")
    pytest.skip(why)
