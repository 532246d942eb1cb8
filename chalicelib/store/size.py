"""DynamoDB's item size, by AWS's published rules: what the 400 KB limit and write capacity count."""
from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from ..domain.errors import ItemTooLarge

MAX_ITEM_BYTES = 400 * 1024


def value_size(value: Any) -> int:
    """Strings count UTF-8 bytes; numbers about one byte per two digits plus one; booleans and null one
    byte; a map or list 3 bytes plus one per element plus its elements (and a map's key names)."""
    kind = type(value)
    if kind is str:
        return len(value.encode("utf-8", "surrogatepass"))
    if kind is dict:  # the common cases first, by exact type (an ABC check is slow on this hot path)
        return 3 + sum(1 + value_size(str(k)) + value_size(v) for k, v in value.items())
    if kind is list:
        return 3 + sum(1 + value_size(v) for v in value)
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, (int, float, Decimal)):
        digits = len(str(abs(value)).replace(".", "").lstrip("0")) or 1
        return (digits + 1) // 2 + 1
    if isinstance(value, (bytes, bytearray)):
        return len(value)
    if isinstance(value, Mapping):
        return 3 + sum(1 + value_size(str(k)) + value_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return 3 + sum(1 + value_size(v) for v in value)
    raise TypeError(f"not a DynamoDB value: {type(value).__name__}")


def item_size(item: Mapping[str, Any]) -> int:
    """Attribute names plus values."""
    return sum(value_size(name) + value_size(value) for name, value in item.items())


def ensure_fits(item: Mapping[str, Any]) -> None:
    """Raise ItemTooLarge (deterministic: a retry cannot help) for an item DynamoDB would refuse."""
    if item_size(item) > MAX_ITEM_BYTES:
        raise ItemTooLarge("the item would exceed the 400 KB item size limit")
