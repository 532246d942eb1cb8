"""The EventBridge bus."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from .. import aws
from .protocol import MAX_ENTRIES, SOURCE, Entry, Rejection

log = logging.getLogger(__name__)
# Short timeouts: a stream batch waits on this call. botocore retries a throttled or failed call once;
# entries EventBridge rejects one by one are retried by put_all.
CLIENT_CONFIG = Config(connect_timeout=2, read_timeout=5, retries={"mode": "standard", "total_max_attempts": 2})


class EventBridgeBus:
    def __init__(self, name: str, *, source: str = SOURCE, client: Any | None = None) -> None:
        self.name, self.source = name, source
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client("events", config=CLIENT_CONFIG)
        return self._client

    def put(self, entries: Sequence[Entry]) -> list[Rejection]:
        if len(entries) > MAX_ENTRIES:
            raise ValueError(f"PutEvents takes at most {MAX_ENTRIES} entries, got {len(entries)}")
        if not entries:
            return []
        request = [{"EventBusName": self.name, "Source": self.source, "DetailType": e.detail_type,
                    "Detail": e.detail, **({"Time": e.time} if e.time is not None else {})} for e in entries]
        try:
            response = self.client.put_events(Entries=request)
        except (ClientError, BotoCoreError) as exc:
            code = exc.response.get("Error", {}).get("Code", "Error") if isinstance(exc, ClientError) else "Unreachable"
            log.warning("PutEvents to %s failed: %s", self.name, exc)
            return [Rejection(e.id, code, str(exc)) for e in entries]
        results = response.get("Entries", [])
        rejected = []
        for index, entry in enumerate(entries):  # results come back in request order
            result = results[index] if index < len(results) else {}
            if result.get("ErrorCode") or not result.get("EventId"):  # no result is no acceptance
                rejected.append(Rejection(entry.id, result.get("ErrorCode", "NoResult"),
                                          result.get("ErrorMessage", "PutEvents returned no result for it")))
        return rejected
