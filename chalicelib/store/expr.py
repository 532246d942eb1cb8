"""A small builder for DynamoDB expressions with placeholder names and values."""
from __future__ import annotations

from typing import Any

from boto3.dynamodb.types import TypeSerializer

_serializer = TypeSerializer()


def to_attr(value: Any) -> dict[str, Any]:
    return _serializer.serialize(_dynamo_safe(value))


def _dynamo_safe(value: Any) -> Any:
    """Floats are not allowed by boto3's serializer; we store none, but ints pass through."""
    if isinstance(value, dict):
        return {k: _dynamo_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_dynamo_safe(v) for v in value]
    return value


class Expr:
    """Collects SET/REMOVE clauses and conditions with generated placeholders."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, dict[str, Any]] = {}
        self._sets: list[str] = []
        self._removes: list[str] = []
        self._conds: list[str] = []

    def path(self, *parts: str) -> str:
        out = []
        for part in parts:
            key = f"#n{len(self.names)}"
            for existing, name in self.names.items():
                if name == part:
                    key = existing
                    break
            self.names[key] = part
            out.append(key)
        return ".".join(out)

    def value(self, value: Any) -> str:
        key = f":v{len(self.values)}"
        self.values[key] = to_attr(value)
        return key

    def set(self, path: str, value: Any) -> Expr:
        self._sets.append(f"{path} = {self.value(value)}")
        return self

    def set_raw(self, clause: str) -> Expr:
        self._sets.append(clause)
        return self

    def remove(self, path: str) -> Expr:
        self._removes.append(path)
        return self

    def cond(self, clause: str) -> Expr:
        """Add one clause of the condition; clauses are ANDed. DynamoDB rejects redundant parentheses,
        so a clause is grouped only when it has a top-level OR."""
        self._conds.append(f"({clause})" if _top_level_or(clause) else clause)
        return self

    def update_kwargs(self) -> dict[str, Any]:
        parts = []
        if self._sets:
            parts.append("SET " + ", ".join(self._sets))
        if self._removes:
            parts.append("REMOVE " + ", ".join(self._removes))
        kwargs: dict[str, Any] = {"UpdateExpression": " ".join(parts)}
        kwargs.update(self._common())
        return kwargs

    def condition_kwargs(self) -> dict[str, Any]:
        return self._common()

    def _common(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if self._conds:
            kwargs["ConditionExpression"] = " AND ".join(self._conds)
        if self.names:
            kwargs["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            kwargs["ExpressionAttributeValues"] = dict(self.values)
        return kwargs


def _top_level_or(clause: str) -> bool:
    depth = 0
    for i, ch in enumerate(clause):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and clause.startswith(" OR ", i):
            return True
    return False
