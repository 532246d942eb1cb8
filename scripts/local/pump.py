"""The stream pump: what AWS's event source mapping does, against the emulator's real Streams API.

It reads each table's stream through shard iterators, hands batches in Lambda's DynamoDB event shape to the
same Chalice handlers AWS would invoke, honours partial batch failures (retrying from the first failed
record, so per-item order holds) and checkpoints the last handled sequence number per shard.

Like the event source mapping's MaximumRetryAttempts and on-failure destination, a record that keeps failing
is retried a bounded number of times (with backoff), then set aside (scripts/local/stream_failures.py) and
the shard moves on. After each pass that changed something (and every few seconds) it publishes its lag
and the number of set-aside records in the meta item /health reads.

Operator: `python -m scripts.local.pump list` shows set-aside records; `... replay <id>` hands one to its
handler again (and forgets it once handled).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from chalicelib import observability as obs

from .handlers import Handler, LambdaContext, stream_handlers
from .stream_failures import FailureStore

log = logging.getLogger("pump")
MAX_ATTEMPTS = 5
RETRY_DELAY = 0.5  # seconds before the second attempt; doubles per attempt up to MAX_RETRY_DELAY
MAX_RETRY_DELAY = 10.0
HEARTBEAT = 5.0  # seconds between status writes when nothing changed
STREAM_LOOKUP = 30.0  # seconds a table's stream and shard list are reused (shards split; tables get recreated)


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
    attempts: int = 0  # failed attempts at retry_from
    next_try: float = 0.0  # monotonic time before which a failing shard is not retried
    lag: float = 0.0  # seconds: age of the oldest record known not to be handled yet


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
                 get_checkpoint: Callable[[str], str | None], set_checkpoint: Callable[[str, str], None], *,
                 failures: FailureStore | None = None, max_attempts: int = MAX_ATTEMPTS,
                 retry_delay: float = RETRY_DELAY, set_status: Callable[[str], None] | None = None) -> None:
        self.dynamodb, self.streams, self.targets = dynamodb, streams, targets
        self.get_checkpoint, self.set_checkpoint = get_checkpoint, set_checkpoint
        self.failures = failures or FailureStore()
        self.max_attempts, self.retry_delay = max_attempts, retry_delay
        self.set_status = set_status
        self._shards: dict[str, _Shard] = {}
        self._streams: dict[str, tuple[str, list[str], float]] = {}  # table -> (stream ARN, shard ids, looked up)
        self._stop = threading.Event()
        self._published: tuple[Any, float] | None = None  # (status without its time, when)
        self.delivered = 0
        self.failed_batches = 0
        self.set_aside = 0

    def poll_once(self) -> int:
        """One pass over every shard of every target; returns how many records were handled."""
        handled = 0
        for target in self.targets:
            arn, shard_ids = self._stream_of(target.table)
            try:
                for shard_id in shard_ids:
                    handled += self._poll_shard(target, arn, shard_id)
            except Exception:
                self._streams.pop(target.table, None)  # a recreated table has a new stream: look it up again
                raise
        self._publish_status()
        return handled

    def _stream_of(self, table: str) -> tuple[str, list[str]]:
        """The table's stream and its shards, looked up once (an idle pass is then one iterator and one read
        per shard) and again every STREAM_LOOKUP seconds, or after a pass over the table failed."""
        known = self._streams.get(table)
        if known is None or time.monotonic() - known[2] > STREAM_LOOKUP:
            arn = self.dynamodb.describe_table(TableName=table)["Table"]["LatestStreamArn"]
            shards = self.streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]
            known = self._streams[table] = (arn, [shard["ShardId"] for shard in shards], time.monotonic())
        return known[0], known[1]

    def status(self) -> dict[str, Any]:
        """What /health reports: lag in seconds, records waiting for a retry, records set aside."""
        return {"lag_seconds": round(max((s.lag for s in self._shards.values()), default=0.0), 1),
                "retrying": sum(1 for s in self._shards.values() if s.retry_from),
                "set_aside": self.failures.count()}

    def _publish_status(self) -> None:
        if self.set_status is None:
            return
        status, now = self.status(), time.monotonic()
        if self._published and self._published[0] == status and now - self._published[1] < HEARTBEAT:
            return
        at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        try:
            self.set_status(json.dumps({**status, "checked_at": at}))
            self._published = (status, now)
        except Exception:
            log.exception("could not publish the pump's status")

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
        if state.retry_from and time.monotonic() < state.next_try:
            return 0  # backing off from a failed record
        # A fresh iterator every pass (as a restarted poller would take): moto replaces a table's stream
        # object when it rolls back a cancelled transaction, which would strand a long-lived iterator.
        resp = self.streams.get_records(ShardIterator=self._iterator(arn, shard_id, state), Limit=target.batch_size)
        records = resp.get("Records", [])
        if not records:
            state.lag = 0.0
            return 0
        event = {"Records": [lambda_record(r, arn) for r in records]}
        result = target.handler(event, LambdaContext(function_name=target.table))
        failures = (result or {}).get("batchItemFailures") if isinstance(result, dict) else None
        handled = records
        if failures:
            self.failed_batches += 1
            first = min((f["itemIdentifier"] for f in failures), key=int)
            handled = [r for r in records if int(r["dynamodb"]["SequenceNumber"]) < int(first)]
            poison = next(r for r in event["Records"] if r["dynamodb"]["SequenceNumber"] == first)
            state.attempts = state.attempts + 1 if state.retry_from == first else 1
            if state.attempts >= self.max_attempts:
                # Bounded like the AWS mapping's MaximumRetryAttempts: park it, and the shard moves on.
                entry = self.failures.put(target.table, shard_id, poison, state.attempts)
                log.error("stream record %s set aside after %d attempts (replay id %s)", first, state.attempts,
                          entry.id)
                self.set_aside += 1
                obs.count(obs.STREAM_RECORDS_SET_ASIDE)
                handled = [r for r in records if int(r["dynamodb"]["SequenceNumber"]) <= int(first)]
                state.retry_from, state.attempts = None, 0
            else:
                state.retry_from = first  # re-read from the failed record next pass
                delay = min(self.retry_delay * 2 ** (state.attempts - 1), MAX_RETRY_DELAY)
                state.next_try = time.monotonic() + delay
            state.lag = _age(poison)
        else:
            state.retry_from, state.attempts = None, 0
            # A full batch may have more behind it: its newest record's age bounds the lag from below.
            state.lag = _age(event["Records"][-1]) if len(records) >= target.batch_size else 0.0
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


def _age(record: dict[str, Any]) -> float:
    created = record.get("dynamodb", {}).get("ApproximateCreationDateTime")
    return max(0.0, time.time() - float(created)) if isinstance(created, (int, float)) else 0.0


def main(argv: list[str] | None = None) -> int:
    """The operator's view of set-aside records: list them, or replay one through its handler."""
    parser = argparse.ArgumentParser(description="stream records the pump set aside")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    replay = sub.add_parser("replay")
    replay.add_argument("id")
    args = parser.parse_args(argv)
    store = FailureStore()
    if args.command == "list":
        for entry in store.list():
            print(json.dumps(entry.summary()))
        return 0
    ok = store.replay(args.id, stream_handlers())
    print("replayed" if ok else "still failing: it stays set aside", file=sys.stdout if ok else sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
