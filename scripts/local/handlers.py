"""What a stream function is: the app's handlers by the table whose stream they read (as the AWS mappings wire
them), called with a Lambda context like the one AWS passes. The pump, the failure store and the stack use it."""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LambdaContext:
    function_name: str
    aws_request_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


def stream_handlers() -> dict[str, Handler]:
    """The app's stream functions by the table whose stream they read."""
    import app as application
    from chalicelib.store.models import HistoryRecord, SessionRecord, TaskRecord
    return {str(SessionRecord.Meta.table_name): application.sessions_stream,
            str(HistoryRecord.Meta.table_name): application.history_stream,
            str(TaskRecord.Meta.table_name): application.tasks_stream}
