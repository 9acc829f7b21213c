"""``python -m blockdraft.cli``: the ``blockdraft`` command."""

from blockdraft.cli import main

raise SystemExit(main())
