"""Lambda's partial-batch contract as the stream functions report it: per-item order, other items go on."""
from __future__ import annotations

from typing import Any

import pytest

from chalicelib.domain.errors import ItemTooLarge, StoreRejected, StoreUnavailable, ValidationError
from chalicelib.functions.streams import process_batch
from chalicelib.services import stream_health
from tests.support.world import World


def record(seq: int, item: str) -> dict[str, Any]:
    return {"dynamodb": {"SequenceNumber": str(seq), "Keys": {"session_id": {"S": item}}}}


def test_process_batch__one_item_fails_transiently__other_items_handled_and_its_later_records_reported() -> None:
    handled: list[str] = []

    def handle(_: Any, r: dict[str, Any]) -> None:
        if r["dynamodb"]["SequenceNumber"] == "2":
            raise StoreUnavailable("the store did not answer")
        handled.append(r["dynamodb"]["SequenceNumber"])

    batch = [record(1, "a"), record(2, "bad"), record(3, "a"), record(4, "bad"), record(5, "b")]
    result = process_batch(World().deps, batch, handle)

    assert handled == ["1", "3", "5"]  # the bad item's later record waits: its order is kept
    assert result == {"batchItemFailures": [{"itemIdentifier": "2"}, {"itemIdentifier": "4"}]}


def test_process_batch__all_handled__no_failures() -> None:
    assert process_batch(World().deps, [record(1, "a"), record(2, "b")], lambda d, r: None) == {
        "batchItemFailures": []}


@pytest.mark.parametrize("error", [ItemTooLarge("too large"), ValidationError("x", "invalid"), KeyError("state"),
                                   StoreRejected("refused")])
def test_process_batch__deterministic_failure__set_aside_at_once_never_retried(error: Exception) -> None:
    """Issue 26: a record that fails the same way on every retry held up every later record of its shard
    (every workspace) while it was retried. It is set aside at once; /health says so and what to do."""
    w = World()
    w.deps.store.set_meta("ready#" + w.deps.settings.deployment_id, "true", "now")
    handled: list[str] = []

    def handle(_: Any, r: dict[str, Any]) -> None:
        if r["dynamodb"]["SequenceNumber"] == "2":
            raise error
        handled.append(r["dynamodb"]["SequenceNumber"])

    batch = [{**record(n, item), "eventName": "MODIFY",
              "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/sessions/stream/x"}
             for n, item in ((1, "a"), (2, "bad"), (3, "a"), (4, "bad"))]
    assert process_batch(w.deps, batch, handle) == {"batchItemFailures": []}
    assert handled == ["1", "3", "4"]
    (key,) = stream_health.set_aside_records(w.deps)
    assert key == "stream#set-aside#sessions#2"
    status, body = stream_health.health(w.deps)
    assert (status, body["status"], body["set_aside_records"]) == (200, "degraded", 1)
    assert "stream#set-aside#" in body["operator_action"]
