"""Child process for ``test_audit_billed.py``: two model calls (``plan``, then ``reply``) on a SQLite file, against
the loopback OpenAI-compatible server named by ``OPENAI_BASE_URL``, with a 1 s client timeout and quick retries.

``python tests/support/billed_child.py DB THREAD`` runs the thread (``invoke`` if it does not exist, else ``resume``
once the killed owner's short lease is over) and prints ``commit <step>`` after each checkpoint and ``done <status>``
at the end. The parent decides what the server answers, and SIGKILLs this process while a request is held.
"""

from __future__ import annotations

import os
import sys

from pydantic import BaseModel

from graphckpt import END, START, StateGraph
from nodes import LLMRetry, chat_node
from support.audit_child import run_or_resume

TIMEOUT = 1.0
"""The client's timeout per request (seconds): a reply held longer times out and is retried."""


class Plan(BaseModel):
    request: str = "weather in Oslo"
    plan: str = ""
    final: str = ""


def build_graph() -> StateGraph:
    retry = LLMRetry(initial_delay=0.05, max_delay=0.2)
    g = StateGraph(Plan)
    g.add_node("plan", chat_node("{request}", output_key="plan", model="fake-model", timeout=TIMEOUT, retry=retry))
    g.add_node(
        "reply", chat_node("answer {plan}", output_key="final", model="fake-model", timeout=TIMEOUT, retry=retry)
    )
    g.add_edge(START, "plan")
    g.add_edge("plan", "reply")
    g.add_edge("reply", END)
    return g


def main(db: str, thread: str) -> int:
    os.environ.setdefault("GRAPHCKPT_LEASE_SECONDS", "0.5")  # a killed child's thread is crashed that soon
    return run_or_resume(build_graph(), db, thread)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
