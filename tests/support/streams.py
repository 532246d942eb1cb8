"""Reading a table's stream back from the emulator and handing its records to the Lambda handlers by hand, as
Lambda would deliver (and redeliver) them."""
from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from chalicelib.store.models import HistoryRecord, SessionRecord
from scripts.local.pump import LambdaContext, lambda_record
from scripts.local.stack import LocalStack

Handler = Callable[[dict[str, Any], Any], Any]
def read_stream(stack: LocalStack, table: str) -> tuple[list[dict[str, Any]], str]:
    """Every record of the table's stream, from TRIM_HORIZON, as GetRecords returns them."""
    assert stack.pump is not None
    dynamodb, streams = stack.pump.dynamodb, stack.pump.streams
    arn = dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(StreamArn=arn, ShardId=shard["ShardId"],
                                              ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
        while iterator:
            resp = streams.get_records(ShardIterator=iterator, Limit=1000)
            if not resp["Records"]:
                break
            records.extend(resp["Records"])
            iterator = resp.get("NextShardIterator")
    return records, arn


def deliver(handler: Handler, records: list[dict[str, Any]], arn: str, sizes: list[int] | None = None) -> None:
    """Invoke the handler as Lambda would, in batches (default: 100), and require every batch to succeed."""
    start, batches = 0, iter(sizes or [])
    while start < len(records):
        size = next(batches, 100)
        event = {"Records": [lambda_record(r, arn) for r in records[start:start + size]]}
        result = handler(event, LambdaContext(function_name="replay"))
        assert result == {"batchItemFailures": []}, result
        start += size


def interleave(records: list[dict[str, Any]], rng: random.Random) -> list[dict[str, Any]]:
    """Shuffle records across items while keeping each item's own order (all a stream guarantees)."""
    queues: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        queues.setdefault(json.dumps(r["dynamodb"]["Keys"], sort_keys=True), []).append(r)
    out = []
    while queues:
        key = rng.choice(sorted(queues))
        out.append(queues[key].pop(0))
        if not queues[key]:
            del queues[key]
    return out


def sessions_table() -> str:
    return str(SessionRecord.Meta.table_name)


def history_table() -> str:
    return str(HistoryRecord.Meta.table_name)


class Replay:
    """Feeds the stack's streams to the handlers by hand, remembering how far the history stream was fed."""

    def __init__(self, stack: LocalStack) -> None:
        self.stack = stack
        self.history_seen = 0

    def sessions(self, order: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = list,
                 sizes: list[int] | None = None) -> int:
        records, arn = read_stream(self.stack, sessions_table())
        deliver(self.stack.app.sessions_stream, order(records), arn, sizes)
        return len(records)

    def history(self, order: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] = list,
                sizes: list[int] | None = None) -> None:
        """All history records (again), then any the delivery itself caused, until none are new."""
        records, arn = read_stream(self.stack, history_table())
        deliver(self.stack.app.history_stream, order(records), arn, sizes)
        self.history_seen = len(records)
        while True:
            records, arn = read_stream(self.stack, history_table())
            fresh = records[self.history_seen:] if len(records) > self.history_seen else []
            self.history_seen = len(records)
            if not fresh:
                return
            deliver(self.stack.app.history_stream, fresh, arn)
