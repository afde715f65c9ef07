"""Rich, imported on first use: a command that prints one line must not pay for tables (~40 ms).

Commands write `ui.Console(...)`, `ui.Table(...)`, `ui.Text(...)`, `ui.escape(...)`: the module
attribute is resolved at the call, so `import nmemd.cli` stays free of rich until something is drawn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console as Console
    from rich.markup import escape as escape
    from rich.table import Table as Table
    from rich.text import Text as Text
else:
    _WHERE = {"Console": "rich.console", "Table": "rich.table", "Text": "rich.text", "escape": "rich.markup"}

    def __getattr__(name: str) -> Any:
        if name not in _WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # once: later lookups are plain module attributes
        return value
