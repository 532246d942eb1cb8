"""The one input boundary: what a request may carry before any service sees it.

Everything a client sends is checked here for shape limits the services and the store rely on without
checking again: a byte cap on the body, strict UTF-8, JSON nesting depth, numbers DynamoDB can hold, no lone
surrogates in any string (DynamoDB and the emulator refuse them only at write time), and path identifiers
that can name a stored object. Field rules (types, lengths, choices) stay with the services' validation.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ..domain.errors import NotFound, PayloadTooLarge, ValidationError

MAX_BODY_BYTES = 1024 * 1024
# The deepest valid body (a late answer: body > in_reply_to > answers > answer > selected_options) is 5 levels;
# DynamoDB documents stop at 32 and Python's parser at its recursion limit.
MAX_DEPTH = 16
# Integers a JavaScript client can represent exactly; DynamoDB itself holds 38 digits.
MAX_INT = 2**53 - 1
MAX_NUMBER_TEXT = 32  # characters of one JSON number literal
MAX_PATH_ID = 256
PATH_ID = re.compile(r"^[A-Za-z0-9._:~-]+$")
SURROGATE = re.compile("[\ud800-\udfff]")
# Possessive: an unterminated string costs one linear scan, never backtracking.
STRING_OR_BRACKET = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+"|[\[\]{}]')
MAX_FIELD_NAME = 80  # how much of a client-chosen key an error message may repeat


class _Rejected:
    """A JSON number or constant the parser met; the walk reports it with its field path."""

    def __init__(self, text: str, why: str) -> None:
        self.text, self.why = text, why


def _parse_int(text: str) -> Any:
    if len(text) > MAX_NUMBER_TEXT:
        return _Rejected(text, "too many digits")
    value = int(text)
    return value if -MAX_INT <= value <= MAX_INT else _Rejected(text, f"out of range (|n| <= {MAX_INT})")


def _parse_float(text: str) -> Any:
    if len(text) > MAX_NUMBER_TEXT:
        return _Rejected(text, "too many digits")
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")) or (value != 0 and not 1e-100 < abs(value) < 1e100):
        return _Rejected(text, "out of range")
    return value


def _parse_constant(text: str) -> Any:
    return _Rejected(text, "not a JSON number")  # NaN, Infinity, -Infinity


def parse_body(raw: bytes | str | None) -> Any:
    """The JSON body (None when empty). Raises PayloadTooLarge or ValidationError naming the body or field."""
    if not raw:
        return None
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"the request body is over {MAX_BODY_BYTES} bytes")
    try:
        text = data.decode("utf-8")  # strict: no other encodings, no encoded surrogates
    except UnicodeDecodeError:
        raise ValidationError("body", "the request body is not valid UTF-8") from None
    _check_depth(text)
    try:
        parsed = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant)
    except (ValueError, RecursionError):
        raise ValidationError("body", "the request body is not valid JSON") from None
    if parsed is None:
        raise ValidationError("body", "the request body must be a JSON object")
    check_value(parsed)
    return parsed


def _check_depth(text: str) -> None:
    """Refuses deep nesting before the parser recurses into it (strings are skipped: brackets there are text)."""
    depth = 0
    for token in STRING_OR_BRACKET.finditer(text):
        char = token.group(0)
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise ValidationError("body", f"the request body is nested deeper than {MAX_DEPTH} levels")
        elif char in "]}":
            depth -= 1


def check_value(value: Any) -> None:
    """Every string (keys too) is valid Unicode and every number representable; errors name the field."""
    for path, item in _walk(value, ""):
        if isinstance(item, _Rejected):
            raise ValidationError(path or "body", f"{path or 'body'}: number {item.why}")
        if isinstance(item, str) and SURROGATE.search(item):
            raise ValidationError(path or "body", f"{path or 'body'} contains an unpaired surrogate")


def _walk(value: Any, path: str) -> Iterator[tuple[str, Any]]:
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, Mapping):
            for key, child in item.items():
                name = _field(where, key)
                yield name, key
                stack.append((name, child))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", child) for i, child in enumerate(item))
        else:
            yield where, item


def _field(parent: str, key: str) -> str:
    """A field path for messages: a client-chosen key is cut short and never carries a surrogate."""
    shown = SURROGATE.sub("\ufffd", key[:MAX_FIELD_NAME])
    return f"{parent}.{shown}" if parent else shown


def path_id(name: str, value: str) -> str:
    """A path parameter that could name a stored object; anything else is missing (404), like an unknown id."""
    if not value or len(value) > MAX_PATH_ID or not PATH_ID.match(value):
        raise NotFound("not found")
    return value


def query_value(name: str, value: str | None, *, max_len: int = 1024) -> str | None:
    """A query parameter: bounded, and free of characters no stored value can hold."""
    if value is None:
        return None
    if len(value) > max_len:
        raise ValidationError(name, f"{name} must be at most {max_len} characters")
    if SURROGATE.search(value) or "\x00" in value:
        raise ValidationError(name, f"{name} contains characters that are not allowed")
    return value
