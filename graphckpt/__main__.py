"""``python -m graphckpt``: the ``graphckpt`` command."""

from graphckpt.cli import main

raise SystemExit(main())
