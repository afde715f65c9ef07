"""JSON with lone surrogates: what Python's json accepts and msgspec refuses, kept with U+FFFD.

A string cut inside an emoji (`"\\ud83d"`) is valid JSON text but not valid
Unicode: msgspec refuses it ("Input data was truncated") and SQLite cannot
hold it. nmem keeps the event with the character replaced (issue #16, finding 5).
"""

import json
import re
from typing import Any, Final

_SURROGATE_ESCAPE: Final = re.compile(rb"\\[uU][dD][89a-fA-F]")
_SURROGATE: Final = re.compile("[\ud800-\udfff]")  # json.loads joins a valid pair, so these are lone


def may_hold_surrogate(raw: bytes) -> bool:
    """Cheap test: the text escapes a UTF-16 surrogate somewhere (paired or not)."""
    return _SURROGATE_ESCAPE.search(raw) is not None


def scrub(value: Any) -> Any:
    """Every string of a decoded JSON value with its lone surrogates replaced by U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return _SURROGATE.sub("\ufffd", value)  # one U+FFFD per lost character
        return value
    if isinstance(value, list):
        return [scrub(v) for v in value]
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    return value


def loads_replacing_surrogates(raw: bytes) -> Any:
    """Python's json (which accepts lone surrogates), then U+FFFD for each; raises ValueError if not JSON."""
    return scrub(json.loads(raw))
