"""``python -m lading``: the same command as ``lading``."""

from lading.cli import main

raise SystemExit(main())
