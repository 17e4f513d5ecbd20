"""What the reading commands print through: strict JSON, the rich renderer (imported on use), and the price
table of ``--prices``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from graphckpt import plain
from graphckpt.audit import Prices
from graphckpt.cli.session import CliError

__all__ = ["print_json", "prices_of", "renderer"]


def print_json(data: Any) -> None:
    """Strict JSON on stdout: non-finite floats (NaN, Infinity) print as ``null`` (see :func:`plain.to_jsonable`)."""
    print(json.dumps(plain.to_jsonable(data), indent=2, ensure_ascii=False, allow_nan=False))


def renderer() -> Any:
    """The rich renderer, or a clear error when rich is missing."""
    try:
        from graphckpt.cli import render
    except ImportError:
        raise CliError("human-readable output needs rich: pip install 'graphckpt[cli]' (or pass --json)") from None
    return render


def prices_of(args: argparse.Namespace) -> Prices | None:
    """The price table of ``--prices FILE``, else of ``$GRAPHCKPT_PRICES``, else none."""
    path = getattr(args, "prices", None)
    return Prices.load(path) if path else Prices.from_env()
