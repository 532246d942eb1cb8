"""Lambda's partial-batch contract as the stream functions report it: per-item order, other items go on."""
from __future__ import annotations

from typing import Any

from chalicelib.functions.streams import process_batch
from tests.support.world import World


def record(seq: int, item: str) -> dict[str, Any]:
    return {"dynamodb": {"SequenceNumber": str(seq), "Keys": {"session_id": {"S": item}}}}


def test_process_batch__one_item_fails__other_items_handled_and_its_later_records_reported() -> None:
    handled: list[str] = []

    def handle(_: Any, r: dict[str, Any]) -> None:
        if r["dynamodb"]["SequenceNumber"] == "2":
            raise ValueError("poison")
        handled.append(r["dynamodb"]["SequenceNumber"])

    batch = [record(1, "a"), record(2, "bad"), record(3, "a"), record(4, "bad"), record(5, "b")]
    result = process_batch(World().deps, batch, handle)

    assert handled == ["1", "3", "5"]  # the bad item's later record waits: its order is kept
    assert result == {"batchItemFailures": [{"itemIdentifier": "2"}, {"itemIdentifier": "4"}]}


def test_process_batch__all_handled__no_failures() -> None:
    assert process_batch(World().deps, [record(1, "a"), record(2, "b")], lambda d, r: None) == {
        "batchItemFailures": []}
