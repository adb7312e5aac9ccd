"""How a job's payload becomes a string and back: the :class:`Serializer` protocol and JSON.

Pickle is never the default: a pickled payload in a shared store lets anyone
who can write to it run code on every worker.
"""

from __future__ import annotations

import json
import json.scanner
from typing import Any, Protocol

__all__ = ["JSONSerializer", "Serializer", "key_not_text"]


class Serializer(Protocol):
    """Turns a payload (dicts, lists, strings, numbers) into a string and back."""

    def dumps(self, value: Any) -> str: ...

    def loads(self, data: str) -> Any: ...


class JSONSerializer:
    """The default serializer: compact JSON, no NaN, nothing that needs a custom type."""

    def dumps(self, value: Any) -> str:
        return _encode(value)

    def loads(self, data: str) -> Any:
        # The scanner json.loads ends in, called at once: the three Python calls
        # on the way cost a worker more per payload than the scan itself. Anything
        # it does not take whole (spaces around, text after, no JSON at all) goes
        # through json.loads, for its answer or its error.
        try:
            value, end = _scan(data, 0)
        except (StopIteration, TypeError, ValueError):
            return json.loads(data)
        return value if end == len(data) else json.loads(data)


# One encoder for every call: json.dumps with options builds an encoder per call,
# which costs a short job more than its handler.
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode
# (typeshed names the scanner's own type as its argument's, not the decoder's.)
_scan = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def key_not_text(value: Any, where: str) -> str | None:
    """Where in ``value`` a dict has a key JSON would turn into text, or None.

    JSON's object keys are text: ``{1: "x"}`` would come back ``{"1": "x"}``, and a
    handler's ``d[1]`` would fail on the worker, attempt after attempt. Said at
    enqueue instead. Only containers are walked, so a job of ids costs a type test.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                return f"{where} has the key {key!r} ({type(key).__name__})"
            if isinstance(item, (dict, list, tuple)):
                found = key_not_text(item, f"{where}[{key!r}]")
                if found is not None:
                    return found
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, (dict, list, tuple)):
                found = key_not_text(item, f"{where}[{i}]")
                if found is not None:
                    return found
    return None
