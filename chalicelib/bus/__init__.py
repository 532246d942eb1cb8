"""The event bus: what a publisher needs (protocol), EventBridge, and an in-memory fake."""
from __future__ import annotations

from .protocol import MAX_ENTRIES, SOURCE, Bus, Entry, Rejection
from .put import put_all

__all__ = ["MAX_ENTRIES", "SOURCE", "Bus", "Entry", "Rejection", "put_all"]
