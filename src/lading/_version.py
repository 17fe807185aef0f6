"""The package version, in a module of its own so every layer may import it (``lading`` re-exports
it as ``lading.__version__``; importing it from ``lading`` itself would be an upward import)."""

__version__ = "0.1.0"
