"""The client event feed: at-least-once, stable ids, the caller's workspace only.

The cursor remembers the last sort key returned and when the read happened, so an event whose stream
processing lagged (its sort key is older than the cursor but it was written later) is still delivered.
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass

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


def _encode(sk: str, read_at: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"sk": sk, "t": read_at}).encode()).decode()


def _decode(cursor: str) -> tuple[str, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        sk, read_at = str(data["sk"]), str(data["t"])
        parse_iso(read_at)
        return sk, read_at
    except (ValueError, KeyError, TypeError) as exc:
        raise ValidationError("after", "after is not a cursor this feed issued") from exc


@obs.long_poll("events")
def list_events(deps: Deps, caller: Caller, after: str | None, wait: int) -> Page:
    caller.require_user()
    if after == "now":  # start from the present: nothing older, but every later write (even a lagging one)
        after_sk = read_at = deps.now()
    elif after:
        after_sk, read_at = _decode(after)
    else:
        after_sk, read_at = "", ""
    low = iso(parse_iso(read_at) - deps.settings.events_lookback) if read_at else ""
    read = [""]

    def probe() -> list[tuple[str, str, Event]] | None:
        read[0] = deps.now()
        rows = deps.store.list_events(caller.workspace_id, low_sk=min(low, after_sk) if after_sk else "",
                                      after_sk=after_sk, written_after=read_at or "", limit=PAGE)
        return rows or None
    rows = poll(deps, probe, wait) or []
    last = max([after_sk, *(sk for sk, _, _ in rows)])
    return Page([e for _, _, e in rows], _encode(last, read[0]))
