"""Timestamps as fixed-width UTC strings, so string order is time order. Pure: no clock is read here."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime(FORMAT)


def parse_iso(value: str) -> datetime:
    return datetime.strptime(value, FORMAT).replace(tzinfo=UTC)


def later(value: str, seconds: float) -> str:
    """`value` moved by `seconds` (an owner deadline, a lease, a watchdog's due time)."""
    return iso(parse_iso(value) + timedelta(seconds=seconds))
