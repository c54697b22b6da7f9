"""``python -m app``: the same as the ``lookahead-chat`` command."""

from app.cli import main

raise SystemExit(main())
