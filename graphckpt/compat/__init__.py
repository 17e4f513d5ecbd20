"""Adapters that put graphckpt's storage under other engines' graphs (see :mod:`graphckpt.compat.langgraph`).

Each needs its own extra; importing this package imports none of them."""
