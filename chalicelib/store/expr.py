"""Placeholder names and values for DynamoDB expressions: no user-controlled text ever enters an expression."""
from __future__ import annotations

from typing import Any

from .attrs import to_attr


class Expr:
    """Generates `#n` name and `:v` value placeholders for one request."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self._by_name: dict[str, str] = {}
        self.values: dict[str, dict[str, Any]] = {}

    def path(self, *parts: str | int) -> str:
        """A document path; an int part is a list index."""
        out = ""
        for part in parts:
            if isinstance(part, int):
                out += f"[{part}]"
                continue
            key = self._by_name.get(part)
            if key is None:
                key = self._by_name[part] = f"#n{len(self.names)}"
                self.names[key] = part
            out += ("." if out else "") + key
        return out

    def value(self, value: Any) -> str:
        """A value placeholder; equal values share one (a shorter request for DynamoDB to parse)."""
        attr = to_attr(value)
        for key, known in self.values.items():
            if known == attr:
                return key
        key = f":v{len(self.values)}"
        self.values[key] = attr
        return key

    def placeholders(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self.names:
            kwargs["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            kwargs["ExpressionAttributeValues"] = dict(self.values)
        return kwargs
