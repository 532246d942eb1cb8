"""Opaque cursors of paged lists: a store position (a few plain values) as URL-safe text, and back.

A cursor that does not decode to a position of the expected shape is the client's mistake: 400 naming the
parameter it came in. The page sizes of the HTTP contract are here too.
"""
from __future__ import annotations

import base64
import binascii
import json

from ..domain.errors import ValidationError

TASKS_PAGE = (50, 100)  # (default, most) per page
SESSIONS_PAGE = (50, 100)
TRANSCRIPT_PAGE = (100, 200)
TURNS_PAGE = (100, 200)
MAX_CURSOR = 1024  # characters: every position this service issues is far shorter


def encode(position: tuple[str, ...] | None) -> str | None:
    if position is None:
        return None
    return base64.urlsafe_b64encode(json.dumps(list(position), separators=(",", ":")).encode()).decode().rstrip("=")


def decode(cursor: str | None, field: str, arity: int) -> tuple[str, ...] | None:
    """The position a cursor of this service names (None for none); ValidationError naming `field` else."""
    if cursor is None or cursor == "":
        return None
    try:
        if len(cursor) > MAX_CURSOR:
            raise ValueError("too long")
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if (not isinstance(raw, list) or len(raw) != arity
                or not all(isinstance(p, str) and p and p.isprintable() for p in raw)):
            raise ValueError("not a position")
        return tuple(raw)
    except (ValueError, binascii.Error, UnicodeDecodeError, RecursionError) as exc:
        raise ValidationError(field, f"{field} is not a cursor this list issued") from exc


def number(position: tuple[str, ...] | None, field: str) -> int | None:
    """A position that is one sequence number."""
    if position is None:
        return None
    if not position[0].isascii() or not position[0].isdigit() or len(position[0]) > 12:
        raise ValidationError(field, f"{field} is not a cursor this list issued")
    return int(position[0])
