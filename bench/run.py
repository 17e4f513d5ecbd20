"""Run the benchmarks: graphckpt against LangGraph and the FLOOR, side by side in one run.

    python bench/run.py                                   # everything, 5 repeats, writes bench/RESULTS.md
    python bench/run.py --workloads W1,W7 --savers sqlite --repeats 9
    python bench/run.py --quick --savers memory,sqlite --out /tmp/results.md   # smoke test sizes
    python bench/run.py --workloads W1,W2 --engines graphckpt --encrypt        # with encryption at rest

Every repeat runs every selected workload on every applicable saver for every engine (the engine order alternates
between repeats), each on a fresh SQLite file or PostgreSQL schema that is dropped afterwards. The report holds the
medians over repeats and the ratios the issue's target table asks for. An engine that cannot be imported is skipped
with a note; PostgreSQL is skipped with a note when the server does not answer. Exit status 1 when any run failed.

Each engine runs in a worker process of its own (one per repeat and workload, ``run.py --worker JOB``) that imports
only that engine, as its users' programs would: importing LangGraph puts ~90,000 more objects on the heap, and
in one shared process the ``gc.collect()`` before every timed call made the other engine's first cache-cold
operation pay for them (graphckpt's W4 ``get_state`` took 0.77 ms beside LangGraph and 0.43 ms alone). This process
only schedules, runs the FLOOR (no engine imported) and writes the report.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import traceback

if __package__ in (None, ""):  # run as a script: make `bench` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import common, floor, report, storage
from bench.workloads import ENGINES_OF, WORKLOADS

ALL_WORKLOADS = ["W1", "W2", "W2Q", "W3", "W4", "W5", "W5C", "W6", "W7", "FLOOR"]
ALL_SAVERS = ["memory", "sqlite", "postgres"]
ALL_ENGINES = ["graphckpt", "langgraph"]


def applicable_savers(workload: str, savers: list[str]) -> list[str]:
    """The savers a workload runs on: W7 only without a saver, W3 also without one (its baseline), W5 only on savers
    that outlive a process, W4 and W6 need a saver, FLOOR on the databases."""
    if workload == "W7":
        return ["none"]
    if workload == "W3":
        return ["none", *savers]
    if workload in ("W5", "W5C", "FLOOR"):
        return [s for s in savers if s in ("sqlite", "postgres")]
    return list(savers)


def load_engines(names: list[str], results: report.Results) -> list[str]:
    """The engines whose adapter imports (checked in a worker process); one that fails is skipped with a note."""
    engines = []
    for name in names:
        reply = _worker({"engine": name, "version": True})
        if "error" in reply[-1]:
            note = f"engine {name} skipped: it failed to import ({reply[-1]['error']})"
            print(f"NOTE: {note}", flush=True)
            results.notes.append(note)
            continue
        engines.append(name)
        results.notes.append(f"engine {name}: {reply[-1]['version']}")
    return engines


def _worker(job: dict[str, object]) -> list[dict[str, object]]:
    """Run ``job`` in a fresh worker process; its replies, one JSON object per line it printed as ``RESULT ...``."""
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        check=False,
    )
    sys.stderr.write(proc.stderr)
    replies = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not replies:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        replies.append({"error": f"worker exited with status {proc.returncode}: {tail}"[:500]})
    return replies


def worker_main(job: dict[str, object]) -> int:
    """The worker side: import one engine, run one workload on its savers, print ``RESULT {json}`` per saver."""
    name = str(job["engine"])
    try:
        engine = importlib.import_module(f"bench.workloads_{name}")
    except Exception as exc:
        print("RESULT " + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 0
    if job.get("version"):
        try:
            print("RESULT " + json.dumps({"version": engine.version()}), flush=True)
        except ImportError as exc:
            print("RESULT " + json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
        return 0
    sizes = common.QUICK if job["quick"] else common.FULL
    workload, tmpdir = str(job["workload"]), str(job["tmpdir"])
    for saver in job["savers"]:  # type: ignore[attr-defined]
        store = storage.open_store(saver, tmpdir, str(job["pg_dsn"]))
        started = time.perf_counter()
        try:
            figures = WORKLOADS[workload](engine, store, sizes, tmpdir)
            reply: dict[str, object] = {"saver": saver, "figures": figures}
        except Exception as exc:
            traceback.print_exc()
            reply = {"saver": saver, "error": f"{type(exc).__name__}: {exc}"[:500]}
        finally:
            storage.drop_store(store)
        reply["seconds"] = time.perf_counter() - started
        print("RESULT " + json.dumps(reply), flush=True)
    return 0


def run_floor(store: storage.Store, sizes: common.Sizes) -> dict[str, float]:
    """FLOOR figures for one database store."""
    if store.kind == "sqlite":
        ms = floor.sqlite_ms_per_commit(store, sizes.floor_commits, sizes.floor_row_bytes)
        ahead = floor.sqlite_ms_per_commit(
            store, sizes.floor_commits, sizes.floor_row_bytes, wal_ahead=common.SQLITE_WAL_AHEAD
        )
        return {"ms_per_commit": ms, "ms_per_commit_wal_ahead": ahead, "row_bytes": sizes.floor_row_bytes}
    else:
        ms = floor.postgres_ms_per_commit(store, sizes.floor_commits, sizes.floor_row_bytes)
    return {"ms_per_commit": ms, "row_bytes": sizes.floor_row_bytes}


def run_all(args: argparse.Namespace, engines: list[str], savers: list[str], results: report.Results) -> None:
    """Every repeat x workload x saver x engine, each on a fresh store; each engine's runs in worker processes."""
    sizes = common.QUICK if args.quick else common.FULL
    with tempfile.TemporaryDirectory(prefix="graphckpt-bench-") as tmpdir:
        for repeat in range(args.repeats):
            order = list(engines)
            if repeat % 2:
                order.reverse()
            for workload in args.workloads:
                applicable = applicable_savers(workload, savers)
                if workload == "FLOOR":
                    for saver in applicable:
                        _run_floor_once(args, sizes, saver, tmpdir, repeat, results)
                    continue
                for name in order:
                    if name not in ENGINES_OF.get(workload, (name,)):
                        continue
                    todo = [s for s in applicable if (name, workload, s) not in results.errors]
                    if not todo:
                        continue
                    job = {
                        "engine": name,
                        "workload": workload,
                        "savers": todo,
                        "quick": args.quick,
                        "pg_dsn": args.pg_dsn,
                        "tmpdir": tmpdir,
                    }
                    for reply in _worker(job):
                        saver = str(reply.get("saver", todo[0]))
                        key = (name, workload, saver)
                        if "error" in reply:
                            results.errors[key] = str(reply["error"])
                            print(f"FAILED {name} {workload} {saver}: {reply['error']}", flush=True)
                            continue
                        figures = reply["figures"]
                        assert isinstance(figures, dict)
                        results.add(key, figures)
                        shown = ", ".join(f"{k}={report._fmt(v)}" for k, v in figures.items())
                        print(
                            f"[{repeat + 1}/{args.repeats}] {name:9} {workload:5} {saver:8} {shown} "
                            f"({reply['seconds']:.1f}s)",
                            flush=True,
                        )


def _run_floor_once(
    args: argparse.Namespace, sizes: common.Sizes, saver: str, tmpdir: str, repeat: int, results: report.Results
) -> None:
    key = ("floor", "FLOOR", saver)
    if key in results.errors:
        return
    store = storage.open_store(saver, tmpdir, args.pg_dsn)  # type: ignore[arg-type]
    try:
        figures = run_floor(store, sizes)
    except Exception as exc:
        results.errors[key] = f"{type(exc).__name__}: {exc}"[:500]
        print(f"FAILED floor FLOOR {saver}:", flush=True)
        traceback.print_exc()
        return
    finally:
        storage.drop_store(store)
    results.add(key, figures)
    shown = ", ".join(f"{k}={report._fmt(v)}" for k, v in figures.items())
    print(f"[{repeat + 1}/{args.repeats}] {'floor':9} FLOOR {saver:8} {shown}", flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="graphckpt vs LangGraph benchmarks")
    parser.add_argument("--workloads", default=",".join(ALL_WORKLOADS), help="comma list of W1..W7, W2Q, W5C, FLOOR")
    parser.add_argument("--savers", default=",".join(ALL_SAVERS), help="comma list of memory, sqlite, postgres")
    parser.add_argument("--engines", default=",".join(ALL_ENGINES), help="comma list of graphckpt, langgraph")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per figure; medians are reported")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (smoke test)")
    parser.add_argument("--pg-dsn", default=storage.DEFAULT_DSN, help="PostgreSQL on loopback")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"))
    parser.add_argument(
        "--encrypt",
        action="store_true",
        help="graphckpt's savers encrypt at rest (a random AES-256 key in GRAPHCKPT_ENCRYPTION_KEYS for the workers)",
    )
    args = parser.parse_args(argv)

    def pick(value: str, allowed: list[str], what: str) -> list[str]:
        chosen = [v.strip() for v in value.split(",") if v.strip()]
        unknown = sorted(set(chosen) - set(allowed))
        if unknown:
            parser.error(f"unknown {what}: {', '.join(unknown)} (choose from {', '.join(allowed)})")
        return chosen

    args.workloads = pick(args.workloads.upper(), ALL_WORKLOADS, "workloads")
    args.savers = pick(args.savers, ALL_SAVERS, "savers")
    args.engines = pick(args.engines, ALL_ENGINES, "engines")
    if args.quick and "--repeats" not in " ".join(argv if argv is not None else sys.argv):
        args.repeats = 1
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        return worker_main(json.loads(argv[1]))
    args = parse_args(argv)
    results = report.Results()
    if args.quick:
        results.notes.append("--quick: tiny sizes for the smoke test; the figures mean nothing")
    if args.encrypt:  # inherited by every worker process: graphckpt's savers read it when they are made
        import base64

        os.environ["GRAPHCKPT_ENCRYPTION_KEYS"] = "bench:" + base64.b64encode(os.urandom(32)).decode()
        results.notes.append("--encrypt: graphckpt's savers encrypt values, writes and events at rest (AES-256-GCM)")
    engines = load_engines(args.engines, results)

    savers = list(args.savers)
    if "postgres" in savers and (reason := storage.postgres_reachable(args.pg_dsn)):
        print(f"NOTE: postgres skipped: {reason}", flush=True)
        results.notes.append(f"postgres skipped: {reason}")
        savers.remove("postgres")

    run_all(args, engines, savers, results)

    text = report.render(
        results,
        header=report.machine_note(args.pg_dsn if "postgres" in savers else None),
        engines=engines,
        command=shlex.join(["python", "bench/run.py", *argv]),
    )
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print()
    print("\n".join(report.targets_table(results)))
    print()
    print("\n".join(report.reference_table(results)))
    print(f"\nwrote {args.out}")
    if results.errors:
        print(f"{len(results.errors)} run(s) failed: {', '.join(' '.join(k) for k in sorted(results.errors))}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
