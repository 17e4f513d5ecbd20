"""W5 child process: run a message thread and either kill itself with SIGKILL at step ``--kill-at``, or resume the
thread and write ``time.time()`` and its CPU time so far (``time.process_time()``) to ``--marker`` when its first
resumed super-step starts. ``--graph chat`` runs the
W5C variant: the same loop with a ``chat_node`` on the offline model making each message (graphckpt only).

Run by :func:`bench.workloads.w5_crash_resume` with ``PYTHONPATH`` at the repository root. It imports only the engine
it measures, so the import cost a user pays on the resume path is inside the measured time. Prints the final state as
one JSON line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import time

from bench import common, storage


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--engine", required=True, choices=["langgraph", "graphckpt"])
    parser.add_argument("--store", required=True, help="bench.storage.Store as JSON")
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--kill-at", type=int, help="SIGKILL this process when step n starts")
    parser.add_argument("--resume", action="store_true", help="resume the thread instead of starting it")
    parser.add_argument("--marker", help="file receiving time.time() and process_time() when the first step starts")
    parser.add_argument("--graph", choices=["messages", "chat"], default="messages", help="W5 or the W5C variant")
    args = parser.parse_args()

    first = True

    def on_step(n: int) -> None:
        nonlocal first
        if first and args.marker:
            with open(args.marker, "w") as f:
                f.write(f"{time.time()!r} {time.process_time()!r}")
        first = False
        if n == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    engine = importlib.import_module(f"bench.workloads_{args.engine}")
    store = storage.Store(**json.loads(args.store))
    build = engine.build_chat if args.graph == "chat" else engine.build_messages
    app = build(store, args.steps, common.W5_MESSAGE_BYTES, on_step)
    try:
        out = app.resume("w5") if args.resume else app.invoke(common.messages_inputs(args.steps), "w5")
    finally:
        app.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
