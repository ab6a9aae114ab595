"""Bounded JSON decoding of small documents whose only container is the outer one.

`json.loads` recurses once per nesting level, so a document of ``[[[[...`` written by
another program (a stored metadata value) or sent by a client (a page cursor) raises
`RecursionError` instead of `ValueError`. `loads_flat` looks at the document's shape first,
without recursion (its strings blanked out by one regular expression, its brackets
counted), and refuses an oversized or nested document with a `ValueError`.
"""

from __future__ import annotations

import json
import re
from typing import Any

_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_CLOSING = {"[": "]", "{": "}"}


def loads_flat(text: str, *, opening: str, max_chars: int) -> Any:
    """The JSON value of `text`, a document of at most `max_chars` characters whose only
    container is its outermost one (`opening`: ``[`` or ``{``); `ValueError` else."""
    if len(text) > max_chars:
        raise ValueError(f"longer than {max_chars:,} characters")
    closing = _CLOSING[opening]
    # Fast path (every value this package writes without a bracket in a string): one pair.
    if text.count("[") + text.count("{") != 1 or text.count("]") + text.count("}") != 1:
        skeleton = _STRING.sub('""', text)
        brackets = [c for c in skeleton if c in "[]{}"]
        if brackets != [opening, closing]:
            raise ValueError("not a flat JSON document")
    elif opening not in text:
        raise ValueError("not a flat JSON document")
    return json.loads(text)
