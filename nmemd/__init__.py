"""nmemd: the per-user memory daemon behind nmem."""

__version__ = "0.1.0.dev0"
# The name on the package index (`nmem` there is another project); the commands stay nmem, nmem-send, ...
DISTRIBUTION = "nmem-agent-memory"

__all__ = ["DISTRIBUTION", "__version__"]
