"""The client feed's cursor (chalicelib/services/feed.py) on the MemoryStore with a hand-moved clock: an event is
stamped `written_at` by its writer just before its put lands, and a read can fall between the two."""
from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.auth.tokens import Caller
from chalicelib.domain.errors import ValidationError
from chalicelib.domain.model import Event
from chalicelib.domain.time import iso
from chalicelib.services import feed
from chalicelib.services.deps import Deps
from chalicelib.store.memory import MemoryStore

WS = "ws-feed"
USER = Caller(sub="user-1", role="user", workspace_id=WS)


class Feed:
    def __init__(self) -> None:
        self.t = datetime(2026, 12, 2, 8, 0, 0, tzinfo=UTC)
        self.store = MemoryStore()
        self.sleeps: list[float] = []
        self.deps = Deps(store=self.store, agentctl=None, clock=lambda: self.t,  # type: ignore[arg-type]
                         new_id=lambda: "x", agent_token=lambda w, s: "", sleep=self._sleep)

    def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.tick(seconds)

    def tick(self, seconds: float = 0.1) -> str:
        self.t += timedelta(seconds=seconds)
        return iso(self.t)

    def event(self, name: str, at: str) -> Event:
        return Event(id=f"evt-{name}", workspace_id=WS, type="task.updated", task_id=f"task-{name}", session_id=None,
                     payload={}, at=at)

    def write(self, event: Event, written_at: str | None = None) -> None:
        """A writer's put: `written_at` is when it was stamped, the put lands now."""
        self.store.put_event(event, written_at or self.tick())

    def read(self, after: str | None, wait: int = 0) -> tuple[list[str], str]:
        self.tick()
        page = feed.list_events(self.deps, USER, after, wait)
        return [e.id for e in page.events], page.cursor


@pytest.fixture
def f() -> Feed:
    return Feed()


def test_put_landing_after_a_read_it_was_stamped_before__on_the_next_page(f: Feed) -> None:
    older_change = f.tick()
    f.write(f.event("a", f.tick()))
    ids, cursor = f.read(None)
    assert ids == ["evt-a"]
    # A lagging writer: its change is older than a (the sort key is behind the cursor), it stamps written_at ...
    stamped = f.tick()
    ids, cursor = f.read(cursor)  # ... a read happens before its put lands ...
    assert ids == []
    f.write(f.event("b", older_change), written_at=stamped)  # ... and then it lands
    ids, cursor = f.read(cursor)
    assert ids == ["evt-b"]  # before: never delivered (written before the read, sort key behind the cursor)
    assert f.read(cursor)[0] == []


def test_quiet_feed__nothing_repeated__a_long_poll_waits(f: Feed) -> None:
    for name in "abc":
        f.write(f.event(name, f.tick()))
    ids, cursor = f.read(None)
    assert ids == ["evt-a", "evt-b", "evt-c"]
    assert f.read(cursor)[0] == []  # within the write margin, yet not again
    f.sleeps.clear()
    ids, cursor = f.read(cursor, wait=3)
    assert ids == [] and sum(f.sleeps) == pytest.approx(3, abs=0.2)  # it waited instead of answering at once
    f.tick(30)  # past the margin: the cursor forgets them, the store query no longer meets them
    ids, cursor = f.read(cursor)
    assert ids == [] and "s" not in json.loads(base64.urlsafe_b64decode(cursor))


def test_now__nothing_written_before__everything_after_even_lagging(f: Feed) -> None:
    f.write(f.event("before", f.tick()))
    stamped = f.tick()  # a put stamped before the cursor (its change happened before it): not news
    ids, cursor = f.read("now")
    f.write(f.event("in-flight", stamped), written_at=stamped)
    assert ids == []
    change = f.tick()
    ids, cursor = f.read(cursor)
    assert ids == []
    f.write(f.event("after", change))  # a change after the cursor whose put lands after the next read
    assert f.read(cursor)[0] == ["evt-after"]


@pytest.mark.parametrize("burst", [feed.SEEN_CAP - 10, feed.SEEN_CAP + 150, 3 * feed.SEEN_CAP])
def test_burst__every_event_once__cursor_bounded__a_long_poll_then_waits(f: Feed, burst: int) -> None:
    for i in range(burst):  # many events, each written at its own moment, all within the write margin
        at = f.tick(0.004)
        f.write(f.event(f"{i:04d}", at), written_at=at)
    delivered: list[str] = []
    cursor = None
    for _ in range(burst // feed.PAGE + 3):
        ids, cursor = f.read(cursor)
        delivered += ids
        assert len(cursor) < 6000  # a query string, well under a gateway's URL limit
    assert sorted(delivered) == [f"evt-{i:04d}" for i in range(burst)]  # every one, and none twice
    f.sleeps.clear()
    assert f.read(cursor, wait=2)[0] == [] and sum(f.sleeps) == pytest.approx(2, abs=0.2)


def test_burst_past_the_cap__a_put_landing_late_within_it__still_delivered(f: Feed) -> None:
    f.write(f.event("first", f.tick()))
    ids, cursor = f.read(None)
    lagging_change, stamped = f.tick(), f.tick()  # a put stamped before the burst lands after it is read
    for i in range(feed.SEEN_CAP):
        at = f.tick(0.001)
        f.write(f.event(f"{i:04d}", at), written_at=at)
    for _ in range(3):
        ids, cursor = f.read(cursor)
    f.write(f.event("late", lagging_change), written_at=stamped)
    assert f.read(cursor)[0] == ["evt-late"]


def test_cursor__earlier_form_still_read__garbage_refused(f: Feed) -> None:
    f.write(f.event("a", f.tick()))
    earlier = base64.urlsafe_b64encode(json.dumps({"sk": "", "t": iso(f.t - timedelta(seconds=1))}).encode())
    assert f.read(earlier.decode())[0] == ["evt-a"]
    t = '"sk": "", "t": "2026-12-02T08:00:00.000000Z"'
    hostile = ['{"sk": "", "t": "x"}', "{" + t + ', "s": [[1]]}', "{" + t + ', "s": [[1e11, "AAAAAAAA"]]}',
               "{" + t + ', "s": [[1.5, "AAAAAAAA"]]}', "{" + t + ', "s": [[1, "AAA"]]}',
               "{" + t + ', "s": [[1, "' + "A" * 8 * (feed.SEEN_CAP + 1) + '"]]}',
               '{"sk": "", "t": "0001-01-01T00:00:00.000000Z"}', "{" + t + ', "f": "0001-01-01T00:00:00.000000Z"}',
               "{" + t + ', "s": [[Infinity, "AAAAAAAA"]]}', "{" + t + ', "s": [[1, 5]]}',
               "[" * 100_000 + "]" * 100_000]
    for bad in ["not-a-cursor", *(base64.urlsafe_b64encode(h.encode()).decode() for h in hostile)]:
        with pytest.raises(ValidationError):
            f.read(bad)

