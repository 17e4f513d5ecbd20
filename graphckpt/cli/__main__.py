"""``python -m graphckpt.cli``: the ``graphckpt`` command."""

from graphckpt.cli import main

raise SystemExit(main())
