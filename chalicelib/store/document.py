"""A tiny document language for conditional writes: each primitive renders itself as a DynamoDB expression
and evaluates (or applies) itself on a plain item, so both stores run the same definition.

Evaluation follows DynamoDB's rules where they matter here: a comparison with a missing attribute is false,
values compare with their type (BOOL true is neither N 1 nor S "true"), SET on a nested path needs its parent
map, REMOVE of a missing map key does nothing.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from .expr import Expr

Part = str | int
Path = tuple[Part, ...]
MISSING: Any = object()


class InvalidPath(Exception):
    """The write names a document path whose parent does not exist (DynamoDB's ValidationException)."""


def lookup(item: Mapping[str, Any], path: Path) -> Any:
    node: Any = item
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return MISSING
        elif not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, (int, float, Decimal)):
        return "N"
    if value is None:
        return "NULL"
    return type(value).__name__


def same(a: Any, b: Any) -> bool:
    """DynamoDB equality: same type and same value."""
    return a is not MISSING and b is not MISSING and _kind(a) == _kind(b) and a == b


# ------------------------------------------------------------------ conditions
class Clause(Protocol):
    def render(self, e: Expr) -> str: ...
    def holds(self, item: Mapping[str, Any]) -> bool: ...


@dataclass(frozen=True)
class Exists:
    path: Path

    def render(self, e: Expr) -> str:
        return f"attribute_exists({e.path(*self.path)})"

    def holds(self, item: Mapping[str, Any]) -> bool:
        return lookup(item, self.path) is not MISSING


@dataclass(frozen=True)
class Missing:
    path: Path

    def render(self, e: Expr) -> str:
        return f"attribute_not_exists({e.path(*self.path)})"

    def holds(self, item: Mapping[str, Any]) -> bool:
        return lookup(item, self.path) is MISSING


@dataclass(frozen=True)
class Equals:
    path: Path
    value: Any

    def render(self, e: Expr) -> str:
        return f"{e.path(*self.path)} = {e.value(self.value)}"

    def holds(self, item: Mapping[str, Any]) -> bool:
        return same(lookup(item, self.path), self.value)


@dataclass(frozen=True)
class SameAs:
    """Attribute-to-attribute comparison."""

    path: Path
    other: Path

    def render(self, e: Expr) -> str:
        return f"{e.path(*self.path)} = {e.path(*self.other)}"

    def holds(self, item: Mapping[str, Any]) -> bool:
        return same(lookup(item, self.path), lookup(item, self.other))


@dataclass(frozen=True)
class OneOf:
    path: Path
    values: tuple[Any, ...]

    def render(self, e: Expr) -> str:
        return f"{e.path(*self.path)} IN ({', '.join(e.value(v) for v in self.values)})"

    def holds(self, item: Mapping[str, Any]) -> bool:
        found = lookup(item, self.path)
        return any(same(found, v) for v in self.values)


@dataclass(frozen=True)
class SizeBelow:
    path: Path
    limit: int

    def render(self, e: Expr) -> str:
        return f"size({e.path(*self.path)}) < {e.value(self.limit)}"

    def holds(self, item: Mapping[str, Any]) -> bool:
        found = lookup(item, self.path)
        return isinstance(found, (list, dict, str)) and len(found) < self.limit


@dataclass(frozen=True)
class Not:
    clause: Clause

    def render(self, e: Expr) -> str:
        return f"NOT ({self.clause.render(e)})"

    def holds(self, item: Mapping[str, Any]) -> bool:
        return not self.clause.holds(item)


# DynamoDB refuses redundant parentheses, so compound clauses are grouped only where precedence needs it
# (NOT binds tighter than AND, AND tighter than OR): an OR inside an AND is the one case.
@dataclass(frozen=True)
class AnyOf:
    clauses: tuple[Clause, ...]

    def render(self, e: Expr) -> str:
        return " OR ".join(c.render(e) for c in self.clauses)

    def holds(self, item: Mapping[str, Any]) -> bool:
        return any(c.holds(item) for c in self.clauses)


@dataclass(frozen=True)
class AllOf:
    clauses: tuple[Clause, ...]

    def render(self, e: Expr) -> str:
        return conjunction(self.clauses, e)

    def holds(self, item: Mapping[str, Any]) -> bool:
        return all(c.holds(item) for c in self.clauses)


def conjunction(clauses: Iterable[Clause], e: Expr) -> str:
    parts = []
    for c in clauses:
        text = c.render(e)
        parts.append(f"({text})" if isinstance(c, AnyOf) and len(c.clauses) > 1 else text)
    return " AND ".join(parts)


# ------------------------------------------------------------------ changes
class Change(Protocol):
    @property
    def path(self) -> Path: ...

    def render(self, e: Expr) -> tuple[str, str]:
        """(action, clause): action is SET or REMOVE."""
        ...

    def apply(self, item: dict[str, Any]) -> None: ...


def _parent(item: dict[str, Any], path: Path) -> Any:
    parent = lookup(item, path[:-1]) if len(path) > 1 else item
    if parent is MISSING or not isinstance(parent, (dict, list)):
        raise InvalidPath("the document path provided in the update expression is invalid for update")
    return parent


@dataclass(frozen=True)
class Put:
    path: Path
    value: Any

    def render(self, e: Expr) -> tuple[str, str]:
        return "SET", f"{e.path(*self.path)} = {e.value(self.value)}"

    def apply(self, item: dict[str, Any]) -> None:
        parent, key = _parent(item, self.path), self.path[-1]
        if isinstance(parent, list):
            assert isinstance(key, int)
            if key < len(parent):
                parent[key] = copied(self.value)
            else:
                parent.append(copied(self.value))
        else:
            parent[key] = copied(self.value)


@dataclass(frozen=True)
class Drop:
    path: Path

    def render(self, e: Expr) -> tuple[str, str]:
        return "REMOVE", e.path(*self.path)

    def apply(self, item: dict[str, Any]) -> None:
        parent = lookup(item, self.path[:-1]) if len(self.path) > 1 else item
        key = self.path[-1]
        if isinstance(parent, dict):
            parent.pop(str(key), None)
        elif isinstance(parent, list) and isinstance(key, int) and key < len(parent):
            del parent[key]


@dataclass(frozen=True)
class Append:
    """Append to a list, creating it when absent."""

    path: Path
    values: tuple[Any, ...]

    def render(self, e: Expr) -> tuple[str, str]:
        p = e.path(*self.path)
        return "SET", f"{p} = list_append(if_not_exists({p}, {e.value([])}), {e.value(list(self.values))})"

    def apply(self, item: dict[str, Any]) -> None:
        parent, key = _parent(item, self.path), self.path[-1]
        current = lookup(item, self.path)
        base = list(current) if isinstance(current, list) else []
        parent[key] = base + copied(list(self.values))


@dataclass(frozen=True)
class Increment:
    path: Path
    by: int = 1

    def render(self, e: Expr) -> tuple[str, str]:
        p = e.path(*self.path)
        return "SET", f"{p} = {p} + {e.value(self.by)}"

    def apply(self, item: dict[str, Any]) -> None:
        current = lookup(item, self.path)
        if isinstance(current, bool) or not isinstance(current, int):
            raise InvalidPath("an operand in the update expression has an incorrect data type")
        _parent(item, self.path)[self.path[-1]] = current + self.by


# ------------------------------------------------------------------ a whole conditional write
@dataclass(frozen=True)
class Write:
    """One conditional write: every clause must hold, then every change applies, atomically."""

    conditions: tuple[Clause, ...]
    changes: tuple[Change, ...]

    def __post_init__(self) -> None:
        paths = [change.path for change in self.changes]
        for i, a in enumerate(paths):
            for b in paths[i + 1:]:
                if a[:len(b)] == b or b[:len(a)] == a:  # DynamoDB refuses overlapping document paths
                    raise ValueError(f"two document paths overlap: {a} and {b}")

    def render(self, e: Expr | None = None) -> dict[str, Any]:
        """UpdateItem keyword arguments (UpdateExpression, ConditionExpression, names, values)."""
        e = e or Expr()
        actions: dict[str, list[str]] = {"SET": [], "REMOVE": []}
        for change in self.changes:
            action, clause = change.render(e)
            actions[action].append(clause)
        kwargs: dict[str, Any] = {
            "UpdateExpression": " ".join(f"{a} {', '.join(cs)}" for a, cs in actions.items() if cs)}
        if self.conditions:
            kwargs["ConditionExpression"] = conjunction(self.conditions, e)
        kwargs.update(e.placeholders())
        return kwargs

    def render_check(self) -> dict[str, Any]:
        """ConditionCheck keyword arguments (a transaction's check of another item)."""
        e = Expr()
        return {"ConditionExpression": conjunction(self.conditions, e), **e.placeholders()}

    def holds(self, item: Mapping[str, Any]) -> bool:
        return all(c.holds(item) for c in self.conditions)

    def applied(self, item: Mapping[str, Any]) -> dict[str, Any]:
        """The item after the changes (the input is not modified)."""
        new = copied(dict(item))
        for change in self.changes:
            change.apply(new)
        return new


def copied(value: Any) -> Any:
    """A deep copy of a stored document (maps, lists and immutable scalars): copy.deepcopy's memo and
    dispatch cost several times this on the in-memory store's every write."""
    kind = type(value)
    if kind is dict:
        return {k: copied(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [copied(v) for v in value]
    if isinstance(value, Mapping):
        return {k: copied(v) for k, v in value.items()}
    return value


def all_of(clauses: Iterable[Clause]) -> Clause:
    items = tuple(clauses)
    return items[0] if len(items) == 1 else AllOf(items)


def any_of(clauses: Sequence[Clause]) -> Clause:
    return clauses[0] if len(clauses) == 1 else AnyOf(tuple(clauses))
