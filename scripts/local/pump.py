"""The stream pump: what AWS's event source mapping does, against the emulator's real Streams API.

It reads each table's stream through shard iterators, hands batches in Lambda's DynamoDB event shape to the
same Chalice handlers AWS would invoke, honours partial batch failures (retrying from the first failed
record, so per-item order holds) and checkpoints the last handled sequence number per shard.
"""
from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

log = logging.getLogger("pump")
Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class Target:
    table: str
    handler: Handler
    batch_size: int = 100


@dataclass
class _Shard:
    checkpoint: str | None = None
    loaded: bool = False
    retry_from: str | None = None


@dataclass
class LambdaContext:
    function_name: str
    aws_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def lambda_record(record: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A GetRecords record as Lambda delivers it (creation time as epoch seconds, the source ARN)."""
    out = dict(record)
    dynamodb = dict(record["dynamodb"])
    created = dynamodb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        dynamodb["ApproximateCreationDateTime"] = int(created.timestamp())
    out["dynamodb"] = dynamodb
    out["eventVersion"] = "1.1"
    out["eventSourceARN"] = stream_arn
    return out


class StreamPump:
    def __init__(self, dynamodb: Any, streams: Any, targets: list[Target],
                 get_checkpoint: Callable[[str], str | None], set_checkpoint: Callable[[str, str], None]) -> None:
        self.dynamodb, self.streams, self.targets = dynamodb, streams, targets
        self.get_checkpoint, self.set_checkpoint = get_checkpoint, set_checkpoint
        self._shards: dict[str, _Shard] = {}
        self._stop = threading.Event()
        self.delivered = 0
        self.failed_batches = 0

    def poll_once(self) -> int:
        """One pass over every shard of every target; returns how many records were handled."""
        handled = 0
        for target in self.targets:
            arn = self.dynamodb.describe_table(TableName=target.table)["Table"]["LatestStreamArn"]
            shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
            for shard in shards:
                handled += self._poll_shard(target, arn, shard["ShardId"])
        return handled

    def drain(self, max_passes: int = 50) -> int:
        """Poll until a pass finds nothing (stream handlers can write records that cause more records)."""
        total = 0
        for _ in range(max_passes):
            n = self.poll_once()
            total += n
            if n == 0:
                break
        return total

    def run(self, interval: float = 0.2) -> None:
        while not self._stop.is_set():
            try:
                if self.poll_once() == 0:
                    self._stop.wait(interval)
            except Exception:
                log.exception("stream poll failed")
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()

    def _poll_shard(self, target: Target, arn: str, shard_id: str) -> int:
        key = f"pump#{target.table}#{shard_id}"
        state = self._shards.setdefault(key, _Shard())
        if not state.loaded:
            state.checkpoint, state.loaded = self.get_checkpoint(key), True
        # A fresh iterator every pass (as a restarted poller would take): moto replaces a table's stream
        # object when it rolls back a cancelled transaction, which would strand a long-lived iterator.
        resp = self.streams.get_records(ShardIterator=self._iterator(arn, shard_id, state), Limit=target.batch_size)
        records = resp.get("Records", [])
        if not records:
            return 0
        event = {"Records": [lambda_record(r, arn) for r in records]}
        result = target.handler(event, LambdaContext(function_name=target.table))
        failures = (result or {}).get("batchItemFailures") if isinstance(result, dict) else None
        handled = records
        if failures:
            self.failed_batches += 1
            first = failures[0]["itemIdentifier"]
            handled = [r for r in records if int(r["dynamodb"]["SequenceNumber"]) < int(first)]
            state.retry_from = first  # re-read from the failed record next pass
        else:
            state.retry_from = None
        if handled:
            state.checkpoint = handled[-1]["dynamodb"]["SequenceNumber"]
            self.set_checkpoint(key, state.checkpoint)
        self.delivered += len(handled)
        return len(handled)

    def _iterator(self, arn: str, shard_id: str, state: _Shard) -> str:
        if state.retry_from:
            kind, seq = "AT_SEQUENCE_NUMBER", state.retry_from
        elif state.checkpoint:
            kind, seq = "AFTER_SEQUENCE_NUMBER", state.checkpoint
        else:
            kind, seq = "TRIM_HORIZON", None
        kwargs: dict[str, Any] = {"StreamArn": arn, "ShardId": shard_id, "ShardIteratorType": kind}
        if seq:
            kwargs["SequenceNumber"] = seq
        return str(self.streams.get_shard_iterator(**kwargs)["ShardIterator"])
