"""DynamoDB's wire form of the values Clarify stores: strings, whole numbers, booleans, null, maps and lists.

boto3's TypeSerializer/TypeDeserializer handle every DynamoDB type through Decimal contexts and a type probe
per value; an aggregate read or written on every request (and every stream record) spent most of its codec
time there. These two functions handle exactly the types the aggregate holds and refuse the rest (floats
included, as boto3 does), so what is stored is what was meant.
"""
from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any


def to_attr(value: Any) -> dict[str, Any]:
    """A plain value to its `{"S": ...}` shape (tuples are lists)."""
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is dict:  # the common cases first, by exact type (an ABC check is slow on this hot path)
        return {"M": {str(k): to_attr(v) for k, v in value.items()}}
    if kind is int:
        return {"N": str(value)}
    if kind is list:
        return {"L": [to_attr(v) for v in value]}
    return _subclass_or_other(value)


def _subclass_or_other(value: Any) -> dict[str, Any]:
    """The rarer shapes: subclasses of the common types, bools, null, other mappings and sequences, bytes."""
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):  # before int: bool is an int
        return {"BOOL": value}
    if isinstance(value, int):
        return {"N": str(value)}
    if value is None:
        return {"NULL": True}
    if isinstance(value, Mapping):
        return {"M": {str(k): to_attr(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"L": [to_attr(v) for v in value]}
    if isinstance(value, Decimal) and value == value.to_integral_value():
        return {"N": str(int(value))}
    if isinstance(value, (bytes, bytearray)):
        return {"B": bytes(value)}
    raise TypeError(f"unsupported type for the store: {type(value).__name__}")


def from_attr(attr: Mapping[str, Any]) -> Any:
    """A `{"S": ...}` shape to its plain value: numbers are ints (we store no fractional numbers), sets lists."""
    (kind, value), = attr.items()
    if kind == "S":
        return value
    if kind == "N":
        return _number(value)
    if kind == "M":
        return {k: from_attr(v) for k, v in value.items()}
    if kind == "L":
        return [from_attr(v) for v in value]
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "SS" or kind == "BS":
        return list(value)
    if kind == "NS":
        return [_number(v) for v in value]
    if kind == "B":
        return value
    raise TypeError(f"unknown DynamoDB type {kind!r}")


def _number(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return int(Decimal(text))
