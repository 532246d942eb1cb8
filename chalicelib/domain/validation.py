"""Request validation: every error names the first bad field; nothing is written before this passes."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ValidationError

MAX_TITLE = 200
MAX_CONTENT = 16_000
MAX_ID = 128
MAX_FRAMES = 50


def body_object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ValidationError("body", "the request body must be a JSON object")
    return body


def text(body: Mapping[str, Any], name: str, *, max_len: int, required: bool = True,
         allow_empty: bool = False) -> str | None:
    """A string field, length-checked on the raw input (code points), then stripped."""
    value = body.get(name)
    if value is None:
        if required:
            raise ValidationError(name, f"{name} is required")
        return None
    if not isinstance(value, str):
        raise ValidationError(name, f"{name} must be a string")
    if len(value) > max_len:
        raise ValidationError(name, f"{name} must be at most {max_len} characters")
    stripped = value.strip()
    if not stripped and not allow_empty:
        raise ValidationError(name, f"{name} must not be empty")
    return stripped


def identifier(body: Mapping[str, Any], name: str, *, required: bool = True) -> str | None:
    value = text(body, name, max_len=MAX_ID, required=required)
    if value is not None and not all(c.isalnum() or c in "-_.:" for c in value):
        raise ValidationError(name, f"{name} may contain only letters, digits and - _ . :")
    return value


def boolean(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise ValidationError(name, f"{name} must be true or false")
    return value


def choice(body: Mapping[str, Any], name: str, allowed: tuple[str, ...], default: str) -> str:
    value = body.get(name, default)
    if value not in allowed:
        raise ValidationError(name, f"{name} must be one of {', '.join(allowed)}")
    return str(value)


def integer(raw: str | None, name: str, *, default: int, low: int, high: int) -> int:
    """A query-string integer within [low, high]."""
    if raw is None or raw == "":
        return default
    # Length first: int() of thousands of digits is slow, and past Python's digit limit it raises.
    if len(raw) > 12 or not raw.isascii() or not raw.lstrip("-").isdigit():
        raise ValidationError(name, f"{name} must be an integer between {low} and {high}")
    value = int(raw)
    if not low <= value <= high:
        raise ValidationError(name, f"{name} must be between {low} and {high}")
    return value
