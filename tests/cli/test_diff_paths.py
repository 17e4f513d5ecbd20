"""Diffs by path: ``Diff.changes()`` walks into dicts, lists and models, ``Diff.to_json_patch()`` is an RFC 6902
patch from ``a`` to ``b``, and the CLI prints both (``graphckpt diff``, ``--format patch``). A field at its default is
a value: one side at its default and the other written is a *change*, with the graph's schema and without it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support.cli import make_cli, ok

from graphckpt import CheckpointRef
from graphckpt.diff import MISSING, Change, FieldChange, diff_values, format_path

A, B = CheckpointRef("t", "a"), CheckpointRef("t", "b")


@pytest.fixture
def cli(tmp_path: Path) -> Any:
    return make_cli(tmp_path)


class Output(BaseModel):
    title: str
    score: float = 0.0


class Result(BaseModel):
    tool: str
    output: list[Output]


def _apply(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """A minimal RFC 6902 applier (add, remove, replace) to check that a patch turns a into b."""
    doc = copy.deepcopy(doc)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last: Any = int(parts[-1]) if isinstance(parent, list) else parts[-1]
        if op["op"] == "remove":
            del parent[last]
        elif op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, op["value"])
        else:
            parent[last] = op["value"]
    return doc


def _dump(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in values.items()}


def test_changes_give_nested_paths_for_dicts_lists_and_models() -> None:
    va = {
        "tool_results": [Result(tool="search", output=[Output(title="x"), Output(title="a")])],
        "meta": {"k": 1, "gone": True, "a.b": [1, 2, 3]},
        "n": 1,
        "old": "o",
    }
    vb = {
        "tool_results": [Result(tool="search", output=[Output(title="x"), Output(title="b")])],
        "meta": {"k": 2, "new": None, "a.b": [1]},
        "n": 1,
        "fresh": [1],
    }
    diff = diff_values(A, va, B, vb)
    assert [(c.where, c.op) for c in diff.changes()] == [
        ("tool_results[0].output[1].title", "replace"),
        ("meta.k", "replace"),
        ("meta['a.b'][2]", "remove"),
        ("meta['a.b'][1]", "remove"),
        ("meta.new", "add"),
        ("meta.gone", "remove"),
        ("fresh", "add"),
        ("old", "remove"),
    ]
    first = next(diff.changes())
    assert first == Change(("tool_results", 0, "output", 1, "title"), "a", "b")
    assert "~ tool_results[0].output[1].title: 'a' -> 'b'" in str(diff)
    assert "same first" not in str(diff)
    # the field view is unchanged
    assert (
        set(diff.changed) == {"tool_results", "meta"} and diff.added == {"fresh": [1]} and diff.removed == {"old": "o"}
    )
    assert isinstance(diff.changed["meta"], FieldChange)


def test_json_patch_turns_a_into_b() -> None:
    va = {"notes": ["a", "b", "c"], "d": {"x/y": 1, "t~": [0]}, "m": Output(title="q")}
    vb = {"notes": ["a", "B"], "d": {"x/y": 2, "t~": [0, 1, 2]}, "m": Output(title="q", score=1.5), "e": 3}
    patch = diff_values(A, va, B, vb).to_json_patch(encode=lambda v: v.model_dump() if isinstance(v, BaseModel) else v)
    assert {"op": "replace", "path": "/d/x~1y", "value": 2} in patch
    assert {"op": "add", "path": "/d/t~0/1", "value": 1} in patch
    assert {"op": "remove", "path": "/notes/2"} in patch
    assert {"op": "replace", "path": "/m/score", "value": 1.5} in patch
    assert _apply(_dump(va), patch) == _dump(vb)


def test_appended_items_are_adds_at_their_index() -> None:
    diff = diff_values(A, {"log": [1]}, B, {"log": [1, 2, 3]})
    assert list(diff.changes()) == [Change(("log", 1), MISSING, 2), Change(("log", 2), MISSING, 3)]
    assert diff.changed["log"].appended == [2, 3]  # backward compatible
    assert format_path(("a", 0, "b c")) == "a[0]['b c']"


def test_cli_diff_prints_paths_and_a_json_patch(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    start = ok(cli("history", "t1", "--json")).json()[0]["checkpoint_id"]
    ok(cli("fork", "t1", start, "--set", 'request="rain"', "--new-thread", "rain"))
    ok(cli("resume", "rain", "-q"))
    out = ok(cli("diff", "t1", "rain")).out
    assert '~ notes[0].text: "plan for weather" -> "plan for rain"' in out
    assert '~ request: "weather" -> "rain"' in out
    assert "same first" not in out
    patch = ok(cli("diff", "t1", "rain", "--format", "patch")).json()
    assert {"op": "replace", "path": "/notes/0/text", "value": "plan for rain"} in patch
    before = ok(cli("show", "t1", "--json")).json()["values"]
    after = ok(cli("show", "rain", "--json")).json()["values"]
    assert _apply(before, patch) == after
    leaves = ok(cli("diff", "t1", "rain", "--json")).json()["changes"]
    assert {
        "path": "notes[0].text",
        "pointer": "/notes/0/text",
        "op": "replace",
        "before": "plan for weather",
        "after": "plan for rain",
    } in leaves


def test_a_field_at_its_default_is_changed_with_and_without_the_graph(cli: Any) -> None:
    ok(cli("run", "cli_graph:app", "--input", '{"request": "weather"}', "--thread", "t1", "-q"))
    first = ok(cli("history", "t1", "--json")).json()[1]["checkpoint_id"]  # after analyze: drafts not yet written
    raw = ok(cli("diff", f"t1@{first}", "t1")).out
    assert "~ drafts: (default) -> 1" in raw and "+ drafts" not in raw
    decoded = ok(cli("diff", f"t1@{first}", "t1", "--graph", "cli_graph:app")).out
    assert "~ drafts: 0 -> 1" in decoded
    as_json = ok(cli("diff", f"t1@{first}", "t1", "--json")).json()
    assert as_json["added"] == {} and as_json["changed"]["drafts"] == {"before": None, "after": 1, "unset": "before"}
    back = ok(cli("diff", "t1", f"t1@{first}", "--format", "patch")).json()
    assert {"op": "remove", "path": "/drafts"} in back  # the raw document has no drafts there
    assert {"op": "add", "path": "/notes/1", "value": {"author": "write", "text": "draft 1"}} not in back
    assert {"op": "remove", "path": "/notes/1"} in back
