"""nmemd: the per-user memory daemon behind nmem."""

__version__ = "0.1.0.dev0"

__all__ = ["__version__"]
