"""GET /events over real HTTP on the emulator: a put that lands after a read it was stamped before still reaches
the client (the unit cases: tests/unit/test_feed.py)."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chalicelib.domain.model import Event
from chalicelib.domain.time import iso
from chalicelib.store.dynamo import DynamoStore
from scripts.local.stack import LocalStack
from tests.conftest import ApiClient


def _event(name: str, at: str) -> Event:
    return Event(id=f"evt-{name}", workspace_id="ws-1", type="task.updated", task_id=f"task-{name}",
                 session_id=None, payload={"title": name}, at=at)


def _page(user: ApiClient, cursor: str) -> tuple[list[str], str]:
    resp = user.get("/events", params={"after": cursor, "wait": 0})
    assert resp.status_code == 200, resp.text
    return [e["id"] for e in resp.json()["events"]], resp.json()["cursor"]


def test_events__put_landing_after_a_read_it_was_stamped_before__delivered_once(stack: LocalStack,
                                                                                 user: ApiClient) -> None:
    store = DynamoStore()
    ids, cursor = _page(user, "now")
    assert ids == []
    older_change = iso(datetime.now(UTC))
    store.put_event(_event("a", iso(datetime.now(UTC))), iso(datetime.now(UTC)))
    ids, cursor = _page(user, cursor)
    assert ids == ["evt-a"]
    stamped = iso(datetime.now(UTC) - timedelta(milliseconds=1))  # a writer stamps, then a read happens ...
    ids, cursor = _page(user, cursor)
    assert ids == []
    store.put_event(_event("b", older_change), stamped)  # ... before its put lands (its change is older than a)
    ids, cursor = _page(user, cursor)
    assert ids == ["evt-b"]
    assert _page(user, cursor)[0] == []  # and not again
