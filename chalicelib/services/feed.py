"""The client event feed: at-least-once, stable ids, the caller's workspace only.

The cursor remembers the last sort key returned, when the read happened and which recently written events it
returned, so an event whose stream processing lagged (its sort key is older than the cursor but it was written
later, even with its put landing just after a read it was stamped before) is still delivered, and once.
"""
from __future__ import annotations

import base64
import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

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


# A seen event is remembered by a short digest of its id (48 bits, 8 characters), grouped by the tenths of a
# second between its write and the cursor's read (so it is forgotten at most 0.1 s after it could come again):
# enough to leave it out of the next page. Past SEEN_CAP events within the margin, the oldest are forgotten and
# the cursor's floor moves up to them instead (nothing written up to then is asked for again), so the cursor stays
# under ~5 KB and nothing repeats; only a put stamped before that floor and landing after the read would then be
# missed, which needs more than SEEN_CAP newer events in its workspace while it is in flight.
TICK = 0.1
SEEN_CAP = 2 * PAGE
CURSOR_YEARS = (2000, 9000)  # a cursor's times lie here, so nothing it asks for can overflow


def _digest(event_id: str) -> str:
    return base64.urlsafe_b64encode(hashlib.blake2b(event_id.encode(), digest_size=6).digest()).decode()


@dataclass(frozen=True)
class Cursor:
    sk: str  # the last sort key returned
    read_at: str  # when the read that returned it happened
    seen: dict[str, str]  # digest -> (at least) its written_at: events returned that a later read may meet again
    floor: str = ""  # nothing written up to this time is news (`after=now`, or the oldest forgotten seen events)


def _encode(c: Cursor) -> str:
    t = parse_iso(c.read_at)
    data: dict[str, object] = {"sk": c.sk, "t": c.read_at}
    if c.seen:
        groups: dict[int, str] = {}
        for d, w in c.seen.items():
            ticks = math.floor((t - parse_iso(w)).total_seconds() / TICK)  # t - ticks >= w: never forgotten early
            groups[ticks] = groups.get(ticks, "") + d
        data["s"] = [[ticks, digests] for ticks, digests in sorted(groups.items())]
    if c.floor:
        data["f"] = c.floor
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).decode()


def _moment(value: object) -> datetime:
    moment = parse_iso(str(value))
    if not CURSOR_YEARS[0] <= moment.year <= CURSOR_YEARS[1]:
        raise ValueError("a cursor's time out of range")
    return moment


def _decode(cursor: str) -> Cursor:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        sk, read_at = str(data["sk"]), str(data["t"])
        t = _moment(read_at)
        seen: dict[str, str] = {}
        groups = data.get("s", [])
        if sum(len(digests) // 8 for _, digests in groups) > SEEN_CAP:
            raise ValueError("a cursor's seen events are too many")
        for ticks, digests in groups:
            if type(ticks) is not int or abs(ticks) > 864_000 or not isinstance(digests, str) or len(digests) % 8:
                raise ValueError("a cursor's seen events are malformed")
            w = iso(t - timedelta(seconds=ticks * TICK))
            seen.update((digests[i:i + 8], w) for i in range(0, len(digests), 8))
        floor = str(data.get("f", ""))
        if floor:
            _moment(floor)
        return Cursor(sk, read_at, seen, floor)
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError, RecursionError) as exc:
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
    floor = cursor.floor
    if len(seen) > SEEN_CAP:  # a burst: forget the oldest, and ask for nothing written up to them again
        floor = max(floor, sorted(seen.values())[len(seen) - SEEN_CAP - 1])
        seen = {d: w for d, w in seen.items() if w > floor}
    return Page([e for _, _, e in rows], _encode(Cursor(last, read[0], seen, floor if floor > horizon else "")))
