"""``python -m blockdraft``: the ``blockdraft`` command (see :mod:`blockdraft.cli`)."""

from blockdraft.cli import main

raise SystemExit(main())
