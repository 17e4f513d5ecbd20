"""Hostile exports: ``graphckpt import`` checks every field and every byte and is all-or-nothing.

Each case takes a real export (or the target's own export of a thread it already has), breaks one thing, and imports
it with the CLI as a memory- and time-bounded child process into a SQLite file and into a PostgreSQL schema that
already hold threads. Every case must: exit non-zero with one ``graphckpt: error:`` line naming the problem and no
traceback; leave every row of every table of the target as it was (a full dump before and after); never import the
canary module that the payloads name.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import pickle
import uuid
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import msgpack
import pytest
import zstandard
from pydantic import BaseModel
from support.hostile import CANARY_MODULE, TIME_LIMIT, Target, one_line_error, plant_canary, run_cli
from support.postgres import PG_DSN, postgres_reachable, require_postgres

from graphckpt import END, START, NodeError, Saver, StateGraph, append
from graphckpt.savers.memory import MemorySaver
from graphckpt.transfer import export_thread


class Note(BaseModel):
    text: str


class S(BaseModel):
    log: Annotated[list[str], append] = []
    notes: Annotated[list[Note], append] = []
    n: int = 0
    big: str = ""


def make_app(saver: Saver, fail_at: int | None) -> Any:
    def step(s: S) -> dict[str, Any]:
        if s.n == fail_at:
            raise RuntimeError(f"crash at {fail_at}")
        return {"log": [f"s{s.n}"], "notes": [Note(text=f"n{s.n}")], "n": s.n + 1, "big": "x" * (100 * s.n)}

    g = StateGraph(S)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 5 else END)
    return g.compile(saver=saver)


async def _failed_thread(saver: Saver, thread_id: str) -> None:
    with pytest.raises(NodeError):
        await make_app(saver, fail_at=3).ainvoke({}, thread_id=thread_id)


async def _export(saver: Saver, thread_id: str) -> list[dict[str, Any]]:
    return [json.loads(line) async for line in export_thread(saver, thread_id)]


# -- the targets, each holding a failed thread ("victim") and a finished one ("done") ----------------------------------


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile_import")


@pytest.fixture(scope="module")
def source_export() -> list[dict[str, Any]]:
    """A failed thread ``t`` (pending writes: the failure) exported from a memory saver."""

    async def build() -> list[dict[str, Any]]:
        source = MemorySaver()
        await _failed_thread(source, "t")
        return await _export(source, "t")

    return asyncio.run(build())


async def _populate(saver: Saver) -> list[dict[str, Any]]:
    async with saver:
        await _failed_thread(saver, "victim")
        await make_app(saver, fail_at=None).ainvoke({}, thread_id="done")
        return await _export(saver, "victim")


@pytest.fixture(scope="module")
def targets(workdir: Path) -> Iterator[dict[str, tuple[Target, list[dict[str, Any]]]]]:
    """name -> (target, the target's own export of its thread ``victim``)."""
    from graphckpt.savers.postgres import PostgresSaver
    from graphckpt.savers.sqlite import SqliteSaver

    path = workdir / "target.db"
    out = {"sqlite": (Target("sqlite", str(path), path=path), asyncio.run(_populate(SqliteSaver(path))))}
    schema = f"gc_hostile_{uuid.uuid4().hex[:10]}"
    if postgres_reachable():
        victim = asyncio.run(_populate(PostgresSaver(PG_DSN, schema=schema)))
        out["postgres"] = (Target("postgres", f"{PG_DSN}?schema={schema}", dsn=PG_DSN, schema=schema), victim)
    yield out
    if postgres_reachable():
        import psycopg

        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


# -- building hostile files --------------------------------------------------------------------------------------------

Lines = list[dict[str, Any]]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def cps(lines: Lines) -> list[dict[str, Any]]:
    return [item for item in lines if item["kind"] == "checkpoint"]


def with_blob(data: bytes, kind: str | None = None) -> Callable[[Lines], Lines]:
    def change(lines: Lines) -> Lines:
        cp = next(cp for cp in cps(lines) if cp["blobs"])
        cp["blobs"][0][2] = b64(data)
        if kind is not None:
            cp["blobs"][0][1] = kind
        return lines

    return change


def with_body(data: bytes, index: int = 1) -> Callable[[Lines], Lines]:
    def change(lines: Lines) -> Lines:
        cps(lines)[index]["body"] = b64(data)
        return lines

    return change


def with_write(data: bytes) -> Callable[[Lines], Lines]:
    def change(lines: Lines) -> Lines:
        writes = next(item for item in lines if item["kind"] == "writes")
        writes["writes"][0][3] = b64(data)
        return lines

    return change


def with_field(field: str, value: Any, index: int = 1) -> Callable[[Lines], Lines]:
    def change(lines: Lines) -> Lines:
        cps(lines)[index][field] = value
        return lines

    return change


def ext(code: int, payload: bytes) -> bytes:
    return msgpack.packb(msgpack.ExtType(code, payload))


def nested_ext(depth: int) -> bytes:
    data = msgpack.packb([])
    for _ in range(depth):
        data = ext(1, data)
    return data


def duplicate_id(lines: Lines) -> Lines:
    first, second = cps(lines)[1], cps(lines)[2]
    second["checkpoint_id"] = first["checkpoint_id"]  # one id at two steps
    return lines


def foreign_lineage(lines: Lines) -> Lines:
    """A body whose lineage says its values live in thread ``done`` (another thread of the target)."""
    cp = cps(lines)[2]
    body = msgpack.unpackb(base64.b64decode(cp["body"]), raw=False, strict_map_key=False, ext_hook=msgpack.ExtType)
    body["lin"] = [["done", 0]]
    cp["body"] = b64(msgpack.packb(body, use_bin_type=True))
    return lines


def step_gap(lines: Lines) -> Lines:
    for cp in cps(lines)[2:]:
        cp["step"] += 1
    return lines


def parent_skips_a_step(lines: Lines) -> Lines:
    cps(lines)[2]["parent_checkpoint_id"] = cps(lines)[0]["checkpoint_id"]
    return lines


def missing_parent(lines: Lines) -> Lines:
    lines.remove(cps(lines)[0])  # the thread's first checkpoint is not in the file, nor in the target
    lines[-1]["checkpoints"] -= 1
    return lines


def duplicate_write(lines: Lines) -> Lines:
    writes = next(item for item in lines if item["kind"] == "writes")
    writes["writes"].append(list(writes["writes"][0]))
    return lines


def write_field(position: int, value: Any) -> Callable[[Lines], Lines]:
    def change(lines: Lines) -> Lines:
        next(item for item in lines if item["kind"] == "writes")["writes"][0][position] = value
        return lines

    return change


def writes_error(value: Any) -> Callable[[Lines], Lines]:
    def change(lines: Lines) -> Lines:
        next(item for item in lines if item["kind"] == "writes")["error"] = value
        return lines

    return change


def empty_result_without_error(lines: Lines) -> Lines:
    """The failed task's own empty result (index 0) is legitimate; another task's is not."""
    writes = next(item for item in lines if item["kind"] == "writes")
    writes["writes"].append(["another-task", "result", 0, ""])
    return lines


def deep_metadata(lines: Lines) -> Lines:
    value: Any = 1
    for _ in range(200):
        value = {"a": value}
    cps(lines)[1]["metadata"] = {"tags": value}
    return lines


PICKLE_0 = f"c{CANARY_MODULE}\nboom\n(tR.".encode()  # protocol 0: GLOBAL gc_canary.boom, call it
PICKLE_4 = b"\x80\x04\x95\x1a\x00\x00\x00\x00\x00\x00\x00\x8c\tgc_canary\x94\x8c\x04boom\x94\x93\x94)R\x94."
LONG_ID = "x" * 5000

# (case id, change of the export's parsed lines, what the one error line must say)
CASES: list[tuple[str, Callable[[Lines], Lines], str]] = [
    ("array-length-bomb", with_blob(b"\xdd\xff\xff\xff\xff"), "does not decode"),
    ("map-length-bomb", with_blob(b"\xdf\xff\xff\xff\xff"), "does not decode"),
    ("str-length-bomb", with_blob(b"\xdb\xff\xff\xff\xff"), "does not decode"),
    ("bin-length-bomb", with_body(b"\xc6\xff\xff\xff\xff"), "does not decode"),
    ("bomb-inside-extension", with_blob(ext(1, b"\xdd\x05\xf5\xe0\xff" + b"\xc0" * 64)), "does not decode"),
    ("nesting-100k", with_blob(b"\x91" * 100_000 + b"\xc0"), "does not decode"),
    ("extension-nesting-2000", with_write(nested_ext(2000)), "does not decode"),
    ("model-naming-a-callable", with_blob(ext(12, msgpack.packb([f"{CANARY_MODULE}:boom", {}]))), "does not name"),
    ("enum-naming-code", with_blob(ext(11, msgpack.packb(["__import__('os').system('id')", 1]))), "does not name"),
    ("model-without-fields", with_blob(ext(12, msgpack.packb(["gc_canary.Boom", [1, 2]]))), "fields are not a map"),
    ("unknown-extension-code", with_blob(ext(42, b"gc_canary.boom")), "unknown extension code 42"),
    ("msgpack-timestamp", with_blob(msgpack.packb(msgpack.Timestamp(1, 0))), "not a graphckpt type"),
    ("zstd-frame", with_blob(zstandard.ZstdCompressor().compress(msgpack.packb(["x"] * 100))), "does not decode"),
    ("zlib-stream", with_blob(zlib.compress(msgpack.packb(["x"] * 100))), "does not decode"),
    ("pickle-protocol-0", with_write(PICKLE_0), "does not decode"),
    ("pickle-protocol-4", with_body(PICKLE_4), "does not decode"),
    ("pickle-really", with_blob(pickle.dumps(Note(text="x"))), "does not decode"),
    ("trailing-bytes", with_blob(msgpack.packb([1]) + b"\x00"), "extra bytes"),
    ("truncated-value", with_blob(b"\x92\x01"), "does not decode"),
    ("invalid-utf8-string", with_blob(b"\x91\xa2\xff\xfe"), "does not decode"),
    ("empty-body", with_body(b""), "does not decode"),
    ("body-not-a-map", with_body(msgpack.packb([1, 2])), "checkpoint body has the wrong shape"),
    ("bad-datetime", with_blob(ext(4, b"not a date")), "does not decode"),
    ("unhashable-set", with_blob(ext(2, msgpack.packb([[1]]))), "does not decode"),
    ("bad-uuid", with_blob(ext(8, b"short")), "does not decode"),
    ("delta-not-a-list", with_blob(msgpack.packb(7), kind="delta"), "delta blob"),
    ("chunk-blob", with_blob(msgpack.packb([]), kind="chunk"), "unknown kind 'chunk'"),
    ("bad-base64", with_field("body", "!!!"), "not valid base64"),
    ("foreign-lineage", foreign_lineage, "lineage that is not its chain"),
    ("created-at-nan", with_field("created_at", float("nan")), "created_at must be a finite number"),
    ("created-at-1e400", with_field("created_at", float("inf")), "created_at must be a finite number"),
    ("created-at-huge", with_field("created_at", 1e300), "created_at is not a representable time"),
    ("created-at-text", with_field("created_at", "1700000000"), "created_at must be a number"),
    ("metadata-nan", with_field("metadata", {"score": float("nan")}), "non-finite number"),
    ("metadata-not-object", with_field("metadata", [1, 2]), "metadata must be a JSON object"),
    ("metadata-too-deep", deep_metadata, "nests deeper than 64"),
    ("metadata-lone-surrogate", with_field("metadata", {"\ud800": 1}), "lone surrogate"),
    ("nul-in-checkpoint-id", with_field("checkpoint_id", "ab\x00cd", index=3), "NUL"),
    ("lone-surrogate-thread-id", with_field("parent_thread_id", "\udcff", index=2), "lone surrogate"),
    ("long-id", with_field("checkpoint_id", LONG_ID, index=3), "longer than 1024 bytes"),
    ("step-text", with_field("step", "1"), "step must be an integer, got '1'"),
    ("step-float", with_field("step", 1.5), "step must be an integer, got 1.5"),
    ("step-bool", with_field("step", True), "step must be an integer, got True"),
    ("step-1e400", with_field("step", float("inf")), "step must be an integer, got inf"),
    ("step-negative", with_field("step", -1), "step must be between 0 and"),
    ("step-2**64", with_field("step", 2**64), "step must be between 0 and"),
    ("step-gap", step_gap, "is not in its body's channel table"),
    ("parent-skips-a-step", parent_skips_a_step, "does not follow checkpoint"),
    ("duplicate-checkpoint-id", duplicate_id, "also on line 3"),
    ("missing-parent", missing_parent, "neither the export nor the target"),
    ("write-index-text", write_field(2, "0"), "index must be an integer"),
    ("write-index-huge", write_field(2, 2**40), "index must be between 0 and"),
    ("write-task-nul", write_field(0, "task\x00"), "NUL"),
    ("write-duplicate", duplicate_write, "appears twice"),
    ("write-unknown-kind", write_field(1, "exec"), "unknown pending write kind 'exec'"),
    ("error-with-nul", writes_error("boom\x00"), "error contains a NUL"),
    ("unknown-field", with_field("graph", f"{CANARY_MODULE}:app"), "unknown field 'graph'"),
    ("empty-write", write_field(3, ""), "does not decode (no bytes)"),
    ("empty-result-of-a-task-that-did-not-fail", empty_result_without_error, "is empty"),
    ("model-naming-os-system", with_blob(ext(12, msgpack.packb(["os.system", {}]))), "names no BaseModel class"),
    ("enum-naming-os-system", with_blob(ext(11, msgpack.packb(["os.system", "id"]))), "names no Enum class"),
    ("model-naming-subprocess", with_blob(ext(12, msgpack.packb(["subprocess.Popen", {}]))), "names no BaseModel"),
    ("model-naming-builtins", with_blob(ext(12, msgpack.packb(["builtins.eval", {}]))), "names no BaseModel"),
    ("model-naming-canary-function", with_blob(ext(12, msgpack.packb(["gc_canary.boom", {}]))), "names no class"),
    ("enum-naming-canary-class", with_blob(ext(11, msgpack.packb(["gc_canary.Boom", 1]))), "names no class"),
    ("write-naming-os-system", with_write(ext(12, msgpack.packb(["os.system", {}]))), "names no BaseModel class"),
    ("write-naming-canary", with_write(ext(11, msgpack.packb(["gc_canary.app", 1]))), "names no class"),
]


def _file(workdir: Path, name: str, lines: Lines | str) -> Path:
    path = workdir / f"{name}.jsonl"
    text = lines if isinstance(lines, str) else "\n".join(json.dumps(item) for item in lines) + "\n"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


def _refused(workdir: Path, target: Target, path: Path, *needles: str) -> str:
    marker = plant_canary(workdir)
    before = target.dump()
    result = run_cli(workdir, "import", str(path), db=target.db)
    line = one_line_error(result, *needles, code=1)
    assert target.dump() == before, "the import changed the target"
    assert not marker.exists(), "code named by the export ran"
    assert result.seconds < TIME_LIMIT / 2
    assert len(line) < 600, "a message quotes hostile input uncut"
    return line


TARGETS = ["sqlite", "postgres"]


def _target(targets: dict[str, tuple[Target, Lines]], name: str) -> tuple[Target, Lines]:
    if name == "postgres":
        require_postgres()
    return targets[name]


def test_the_corpus_is_large_and_the_canary_works(workdir: Path) -> None:
    assert len({name for name, _, _ in CASES}) == len(CASES) >= 40
    marker = plant_canary(workdir)
    marker.unlink(missing_ok=True)
    run_cli(workdir, "graph", f"{CANARY_MODULE}:app")  # naming it on purpose does import it
    assert marker.exists()
    marker.unlink()


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize(("name", "change", "needle"), CASES, ids=[c[0] for c in CASES])
def test_hostile_export_is_refused_and_changes_nothing(
    workdir: Path,
    source_export: Lines,
    targets: dict[str, tuple[Target, Lines]],
    target_name: str,
    name: str,
    change: Callable[[Lines], Lines],
    needle: str,
) -> None:
    target, _victim = _target(targets, target_name)
    path = _file(workdir, name, change(copy.deepcopy(source_export)))
    _refused(workdir, target, path, needle)


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("json-100k-deep", '{"kind": "header", "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n", "nests too deeply"),
        (
            "json-lone-surrogate",
            '{"kind": "header", "format": "graphckpt-thread", "version": 1, "thread_id": "\\ud800"}\n',
            "lone surrogate",
        ),
        (
            "header-only",
            '{"kind": "header", "format": "graphckpt-thread", "version": 1, "thread_id": "t"}\n',
            "truncated",
        ),
    ],
    ids=["json-100k-deep", "json-lone-surrogate", "header-only"],
)
def test_hostile_json_is_refused(
    workdir: Path, targets: dict[str, tuple[Target, Lines]], target_name: str, name: str, text: str, needle: str
) -> None:
    target, _victim = _target(targets, target_name)
    _refused(workdir, target, _file(workdir, name, text), needle)


# -- rewriting a thread the target already has -------------------------------------------------------------------------


def forge_status(lines: Lines) -> Lines:
    writes = next(item for item in lines if item["kind"] == "writes")
    writes.update(status="running", error=None, writes=[])  # claim it, clear its error
    return lines


def forge_result(lines: Lines) -> Lines:
    writes = next(item for item in lines if item["kind"] == "writes")
    writes["writes"][0][3] = b64(msgpack.packb({"n": 99}))  # a task result the run never made
    return lines


def other_body(lines: Lines) -> Lines:
    cp = cps(lines)[2]
    body = msgpack.unpackb(base64.b64decode(cp["body"]), raw=False, strict_map_key=False, ext_hook=msgpack.ExtType)
    body["t"] = [["evil"]]
    cp["body"] = b64(msgpack.packb(body, use_bin_type=True))
    return lines


def other_blob(lines: Lines) -> Lines:
    cp = next(cp for cp in cps(lines) if cp["blobs"])
    cp["blobs"][0][2] = b64(msgpack.packb(["forged"]) if cp["blobs"][0][1] == "delta" else msgpack.packb("forged"))
    return lines


def other_metadata(lines: Lines) -> Lines:
    cps(lines)[1]["metadata"] = {**cps(lines)[1]["metadata"], "source": "update"}
    return lines


def other_time(lines: Lines) -> Lines:
    cps(lines)[1]["created_at"] += 1.0
    return lines


def dropped_blob(lines: Lines) -> Lines:
    cp = next(cp for cp in cps(lines) if cp["blobs"])
    cp["blobs"].pop(0)
    return lines


EXISTING: list[tuple[str, Callable[[Lines], Lines], str]] = [
    ("forged-status", forge_status, "'victim' exists in the target"),
    ("forged-result", forge_result, "another status or other pending writes"),
    ("other-body", other_body, "already has checkpoint"),
    ("other-blob", other_blob, "with other stored values"),
    ("dropped-blob", dropped_blob, "with other stored values"),
    ("other-metadata", other_metadata, "with other content"),
    ("other-created-at", other_time, "with other content"),
]


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize(("name", "change", "needle"), EXISTING, ids=[c[0] for c in EXISTING])
def test_an_existing_thread_is_never_rewritten(
    workdir: Path,
    targets: dict[str, tuple[Target, Lines]],
    target_name: str,
    name: str,
    change: Callable[[Lines], Lines],
    needle: str,
) -> None:
    target, victim = _target(targets, target_name)
    _refused(workdir, target, _file(workdir, f"existing-{name}", change(copy.deepcopy(victim))), needle, "'victim'")


@pytest.mark.parametrize("target_name", TARGETS)
def test_the_targets_own_export_imports_as_a_no_op(
    workdir: Path, targets: dict[str, tuple[Target, Lines]], target_name: str
) -> None:
    target, victim = _target(targets, target_name)
    before = target.dump()
    result = run_cli(workdir, "import", str(_file(workdir, "identical", victim)), db=target.db)
    assert result.code == 0 and result.out.strip() == "imported thread victim", result.err
    assert target.dump() == before


@pytest.mark.parametrize("target_name", TARGETS)
def test_a_graph_reference_in_imported_metadata_is_only_data(
    workdir: Path, source_export: Lines, targets: dict[str, tuple[Target, Lines]], target_name: str
) -> None:
    """A valid export whose threads record the canary (and ``os:abort``) as their graph imports, and reading it with
    every reading command runs nothing."""
    target, _victim = _target(targets, target_name)
    lines = copy.deepcopy(source_export)
    tid = f"canary-{target_name}-{uuid.uuid4().hex[:6]}"
    for item in lines:
        if "thread_id" in item:
            item["thread_id"] = tid
        if item["kind"] == "checkpoint":
            item["parent_thread_id"] = tid if item["parent_thread_id"] else None
            item["metadata"]["tags"] = {"graph": f"{CANARY_MODULE}:app" if item["step"] % 2 else "os:abort"}
            body = msgpack.unpackb(
                base64.b64decode(item["body"]), raw=False, strict_map_key=False, ext_hook=msgpack.ExtType
            )
            body["lin"] = [[tid, 0]]
            item["body"] = b64(msgpack.packb(body, use_bin_type=True))
            item["blobs"] = [[ch, kind, data] for ch, kind, data in item["blobs"]]
    marker = plant_canary(workdir)
    ok = run_cli(workdir, "import", str(_file(workdir, tid, lines)), db=target.db)
    assert ok.code == 0, ok.err
    for args in (
        ["show", tid],
        ["show", tid, "--json"],
        ["history", tid],
        ["history", tid, "--tree"],
        ["threads"],
        ["diff", tid, f"{tid}@"],
        ["export", tid],
    ):
        result = run_cli(workdir, *args, db=target.db)
        assert result.code == 0 and "Traceback" not in result.err, (args, result.err)
    assert not marker.exists()
