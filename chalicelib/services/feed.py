"""The client event feed: at-least-once, stable ids, the caller's workspace only.

The cursor remembers the last sort key returned, when the read happened and which recently written events it
returned, so an event whose stream processing lagged (its sort key is older than the cursor but it was written
later, even with its put landing just after a read it was stamped before) is still delivered, and once.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

from .. import observability as obs
from ..auth.tokens import Caller
from ..domain.errors import ValidationError
from ..domain.model import Event
from .deps import Deps, iso, parse_iso
from .polling import poll

PAGE = 200


@dataclass(frozen=True)
class Page:
    events: list[Event]
    cursor: str


# A seen event is remembered by a short digest of its id (48 bits, 8 characters) under how long before the
# cursor's read it was written (milliseconds): enough to leave it out of the next page and to forget it once it
# is past the margin. Past SEEN_CAP events within the margin the oldest are forgotten early and may come once
# more (the feed is at-least-once); the cursor stays a few kilobytes.
SEEN_CAP = 2 * PAGE


def _digest(event_id: str) -> str:
    return base64.urlsafe_b64encode(hashlib.blake2b(event_id.encode(), digest_size=6).digest()).decode()


@dataclass(frozen=True)
class Cursor:
    sk: str  # the last sort key returned
    read_at: str  # when the read that returned it happened
    seen: dict[str, str]  # digest -> written_at: events returned that a later read may meet again (see below)
    floor: str = ""  # an `after=now` cursor: nothing written before this time is news


def _encode(c: Cursor) -> str:
    t = parse_iso(c.read_at)
    data: dict[str, object] = {"sk": c.sk, "t": c.read_at}
    if c.seen:
        groups: dict[int, str] = {}
        for d, w in c.seen.items():
            ms = round((t - parse_iso(w)).total_seconds() * 1000)
            groups[ms] = groups.get(ms, "") + d
        data["s"] = [[ms, digests] for ms, digests in groups.items()]
    if c.floor:
        data["f"] = c.floor
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def _decode(cursor: str) -> Cursor:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        sk, read_at = str(data["sk"]), str(data["t"])
        t = parse_iso(read_at)
        seen = {str(digests)[i:i + 8]: iso(t - timedelta(milliseconds=int(ms)))
                for ms, digests in data.get("s", []) for i in range(0, len(digests), 8)}
        floor = str(data.get("f", ""))
        if floor:
            parse_iso(floor)
        return Cursor(sk, read_at, seen, floor)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValidationError("after", "after is not a cursor this feed issued") from exc


@obs.long_poll("events")
def list_events(deps: Deps, caller: Caller, after: str | None, wait: int) -> Page:
    """A page of the caller's feed after the cursor `after` ("now": from the present; none: from the start).

    An event's `written_at` is stamped by its writer just before its put lands, so a read can happen between
    the two: the next read then asks for everything written up to `events_write_margin` before the last read
    (not after it, which would miss that event for good when its sort key is already behind the cursor), and
    leaves out what the cursor says it already returned, so a quiet feed still waits instead of repeating.
    """
    caller.require_user()
    margin = deps.settings.events_write_margin
    if after == "now":  # start from the present: nothing older, but every later write (even a lagging one)
        now = deps.now()
        cursor = Cursor(now, now, {}, floor=now)
    elif after:
        cursor = _decode(after)
    else:
        cursor = Cursor("", "", {})
    low = iso(parse_iso(cursor.read_at) - deps.settings.events_lookback) if cursor.read_at else ""
    written_after = max(iso(parse_iso(cursor.read_at) - margin), cursor.floor) if cursor.read_at else ""
    read = [""]

    def probe() -> list[tuple[str, str, Event]] | None:
        read[0] = deps.now()
        rows = deps.store.list_events(caller.workspace_id, low_sk=min(low, cursor.sk) if cursor.sk else "",
                                      after_sk=cursor.sk, written_after=written_after,
                                      limit=PAGE + len(cursor.seen))
        fresh = [row for row in rows if _digest(row[2].id) not in cursor.seen][:PAGE]
        return fresh or None
    rows = poll(deps, probe, wait) or []
    last = max([cursor.sk, *(sk for sk, _, _ in rows)])
    horizon = iso(parse_iso(read[0]) - margin)  # the next read asks for nothing written before this
    seen = {d: w for d, w in cursor.seen.items() if w > horizon}
    seen.update((_digest(e.id), w) for _, w, e in rows if w > horizon)
    if len(seen) > SEEN_CAP:  # a burst: the oldest may come once more (the feed is at-least-once)
        seen = dict(sorted(seen.items(), key=lambda kv: kv[1])[-SEEN_CAP:])
    floor = cursor.floor if cursor.floor > horizon else ""
    return Page([e for _, _, e in rows], _encode(Cursor(last, read[0], seen, floor)))
