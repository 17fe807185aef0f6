"""``python -m lading``: the same command as ``lading``."""

from lading.cli import run

run()
