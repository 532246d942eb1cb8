"""Stream records the local pump set aside after their retries, kept whole so an operator can replay them.

AWS parks such records in the stream failure queue (only their shard and sequence range: replay reads the
stream again within its 24 hours). Locally each one is a JSON file holding the record exactly as the
handler received it, so a replay works even after the emulator trimmed or rebuilt its stream.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .handlers import Handler, LambdaContext

DEFAULT_DIR = ".local/stream-failures"


@dataclass(frozen=True)
class SetAside:
    id: str
    table: str
    shard_id: str
    sequence_number: str
    attempts: int
    set_aside_at: str
    record: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        keys = self.record.get("dynamodb", {}).get("Keys")
        return {"id": self.id, "table": self.table, "shard_id": self.shard_id,
                "sequence_number": self.sequence_number, "attempts": self.attempts,
                "set_aside_at": self.set_aside_at, "event": self.record.get("eventName"), "keys": keys}


class FailureStore:
    """A directory of set-aside records, one file each (the operator can also read them by hand)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.dir = Path(directory or os.environ.get("CLARIFY_STREAM_FAILURE_DIR") or DEFAULT_DIR)

    def put(self, table: str, shard_id: str, record: dict[str, Any], attempts: int) -> SetAside:
        seq = str(record["dynamodb"]["SequenceNumber"])
        entry = SetAside(id=_safe(f"{table}~{shard_id}~{seq}"), table=table, shard_id=shard_id,
                         sequence_number=seq, attempts=attempts,
                         set_aside_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), record=record)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{entry.id}.tmp"
        tmp.write_text(json.dumps(vars(entry), default=str))
        tmp.replace(self.dir / f"{entry.id}.json")  # whole or not at all
        return entry

    def list(self) -> list[SetAside]:
        if not self.dir.is_dir():
            return []
        return [SetAside(**json.loads(p.read_text())) for p in sorted(self.dir.glob("*.json"))]

    def count(self) -> int:
        return len(list(self.dir.glob("*.json"))) if self.dir.is_dir() else 0

    def get(self, entry_id: str) -> SetAside | None:
        path = self.dir / f"{_safe(entry_id)}.json"
        return SetAside(**json.loads(path.read_text())) if path.is_file() else None

    def remove(self, entry_id: str) -> None:
        (self.dir / f"{_safe(entry_id)}.json").unlink(missing_ok=True)

    def replay(self, entry_id: str, handlers: dict[str, Handler]) -> bool:
        """Hands the record to its table's handler again; on success it is no longer set aside."""
        entry = self.get(entry_id)
        if entry is None:
            raise KeyError(f"no set-aside record {entry_id!r}")
        result = handlers[entry.table]({"Records": [entry.record]}, LambdaContext(function_name=entry.table))
        failures = result.get("batchItemFailures") if isinstance(result, dict) else None
        if failures:
            return False
        self.remove(entry_id)
        return True


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._~-]", "_", name)[:200]
