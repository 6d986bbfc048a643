"""``python -m proxy.cli``: the same as the ``manifold`` command."""

from proxy.cli.commands import main

raise SystemExit(main())
