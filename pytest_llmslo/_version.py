"""The package version, in a module of its own that imports nothing: every layer may read
it without importing the package's root (which lazily imports the layers above)."""

__version__ = "0.1.0"
