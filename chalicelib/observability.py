"""Logs, metrics and traces with AWS Lambda Powertools; correlation ids bound once per request or record.

`log.info("...", extra={"fields": {...}})` adds values of that one line (a status, a duration).

- Logs: every module logs through the standard library; in JSON (Lambda) each line is Powertools Logger's
  shape (LambdaPowertoolsFormatter: `level`, `location`, `message`, `timestamp`, `service`, `xray_trace_id`)
  plus the bound ids. Locally the text format prints readable lines.
- Metrics: each one is an EMF document built by Powertools Metrics, written at once as its own line (a
  Lambda that times out loses nothing), with the dimension `service` (what the alarms watch) and at most one
  breakdown dimension (`delivery`, `reason`, ...).
- Traces: Powertools Tracer (X-Ray) patches botocore (DynamoDB, EventBridge) and http.client (agentctl);
  each request and invocation is a subsegment annotated with its correlation ids. Off outside Lambda.

Ids bound with `scope` / `bind` live in a context variable, so every log record made while they are bound
carries them, whichever module logs it; a scope ends with its request, stream record or invocation. Only ids
are ever bound: never a token, a message, an answer or a prompt text.
"""
from __future__ import annotations

import contextvars
import copy
import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from types import MappingProxyType
from typing import Any, TextIO, TypeVar

from aws_lambda_powertools import Tracer
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.metrics import EphemeralMetrics

# ------------------------------------------------------------------ metric names (the template's alarms and
# dashboard read the same constants; infra/observability.py)
ANSWERS = "Answers"  # delivery: live | resumed | recorded | late
CONFLICTS = "Conflicts"  # reason: the 409's details.reason, else its code
RESTORES = "Restores"  # cause: unconfirmed (no live confirmation) | rollback (resume failed) | reconciler
AMBIGUOUS_DISPATCHES = "AmbiguousDispatches"  # path: resume | prompt | reconciler
LIVE_FALL_THROUGHS = "LiveFallThroughs"  # a live answer nobody confirmed continued as a detached resume
WATCHDOG_FALLBACKS = "WatchdogFallbacks"
RECONCILER_REPAIRS = "ReconcilerRepairs"  # kind: the reconciler report's counter
QUARANTINES = "Quarantines"  # sessions the reconciler set aside because it could not repair them
STREAM_RECORD_FAILURES = "StreamRecordFailures"  # records a stream batch reported failed (to be retried)
STREAM_RECORDS_SET_ASIDE = "StreamRecordsSetAside"  # table: records parked after their retries (local pump)
LONG_POLL_WAITS = "LongPollWaits"  # kind: events | waiter
LONG_POLL_SECONDS = "LongPollSeconds"  # kind: events | waiter
PUSHES = "Pushes"  # outcome: sent | expired (404/410: subscription removed) | failed | retried

NAMESPACE = "Clarify"
DEFAULT_SERVICE = "clarify"
FORMATS = ("json", "text")
# Keys every line may carry, in the order the text format prints them.
ID_KEYS = ("request_id", "route", "workspace", "task", "session", "turn", "clarification", "delivery",
           "execution", "generation", "successor_turn", "stream_record", "function")
F = TypeVar("F", bound=Callable[..., Any])

_ids: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar("clarify_ids", default=MappingProxyType({}))
# Not under "clarify": that is the Chalice app's own logger, which prints its records itself and does not
# propagate them.
METRICS_LOGGER = "chalicelib.metrics"
_metrics_log = logging.getLogger(METRICS_LOGGER)
_metrics_log.setLevel(logging.INFO)  # metrics never depend on the log level
_cold = True
# What X-Ray traces: the AWS SDK (DynamoDB, EventBridge; PynamoDB goes through it) and http.client (agentctl).
TRACED_MODULES = ("botocore", "httplib")
# Correlation ids that become annotations (searchable in X-Ray: annotation.session = "...").
ANNOTATED = ("request_id", "route", "workspace", "task", "session", "turn", "clarification", "function")


def service() -> str:
    return os.environ.get("CLARIFY_SERVICE") or os.environ.get("POWERTOOLS_SERVICE_NAME") or DEFAULT_SERVICE


def namespace() -> str:
    return os.environ.get("CLARIFY_METRICS_NAMESPACE") or NAMESPACE


tracer = Tracer(service=service(), patch_modules=TRACED_MODULES)


@contextmanager
def traced(name: str) -> Iterator[None]:
    """A subsegment `## name` for a request or an invocation, annotated with the ids bound in it."""
    if tracer.disabled:
        yield
        return
    with tracer.provider.in_subsegment(f"## {name}"):
        _annotate(_ids.get())
        yield


def _annotate(ids: Mapping[str, str]) -> None:
    if tracer.disabled:
        return
    from aws_xray_sdk.core import xray_recorder  # the tracer's provider
    from aws_xray_sdk.core.models.subsegment import Subsegment

    entity = xray_recorder.get_trace_entity()
    if isinstance(entity, Subsegment):  # Lambda's own segment is a facade that takes no annotation
        for key in ANNOTATED:
            if key in ids:
                entity.put_annotation(key, ids[key])


# ------------------------------------------------------------------ correlation ids
def _clean(ids: dict[str, object]) -> dict[str, str]:
    return {k: str(v) for k, v in ids.items() if v is not None and v != ""}


def _merged(ids: dict[str, object]) -> dict[str, str]:
    """The current ids updated with `ids`; a key given as None or "" is unbound (nothing stale stays)."""
    out = {k: v for k, v in _ids.get().items() if k not in ids}
    out.update(_clean(ids))
    return out


def bind(**ids: object) -> None:
    """Bind ids in the current scope (a request, a stream record); None or "" unbinds that key."""
    _ids.set(_merged(ids))
    _annotate(_ids.get())


@contextmanager
def scope(**ids: object) -> Iterator[None]:
    """Ids bound for the duration of the block; whatever was bound inside it ends with it."""
    token = _ids.set(_merged(ids))
    _annotate(_ids.get())
    try:
        yield
    finally:
        _ids.reset(token)


def current() -> dict[str, str]:
    return dict(_ids.get())


def bind_session(session: Any, **more: object) -> None:
    """The ids of a session aggregate (workspace, task, session, its current turn) plus `more`."""
    turn = getattr(session, "current_turn", None)
    bind(workspace=session.workspace_id, task=session.task_id, session=session.id,
         turn=turn.id if turn is not None else None, **more)


def invocation(name: str) -> Callable[[F], F]:
    """For a Lambda entry point `fn(event, context)` or `fn(event)`: binds the request id and function name
    for the invocation, with `cold_start` true on the first one of the process."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def handler(event: Any, *args: Any) -> Any:
            global _cold
            context = args[0] if args else getattr(event, "context", None)
            cold, _cold = _cold, False
            with scope(function=name, request_id=getattr(context, "aws_request_id", None)), traced(name):
                bind(cold_start="true" if cold else None)
                return fn(event, *args)
        return handler  # type: ignore[return-value]
    return wrap


def _record_factory(factory: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        record.clarify_ids = _ids.get()  # taken when the record is made, wherever it is formatted later
        return record
    make.clarify = True  # type: ignore[attr-defined]
    return make


if not getattr(logging.getLogRecordFactory(), "clarify", False):
    logging.setLogRecordFactory(_record_factory(logging.getLogRecordFactory()))


# ------------------------------------------------------------------ formats
class JsonFormatter(LambdaPowertoolsFormatter):
    """Powertools Logger's JSON line, with the bound ids, the line's fields and any metric as top-level keys."""

    def __init__(self) -> None:
        super().__init__(service=service(), use_rfc3339=True)

    def format(self, record: logging.LogRecord) -> str:
        extra: dict[str, Any] = dict(getattr(record, "clarify_ids", {}))
        extra.update(getattr(record, "fields", None) or {})
        if "request_id" in extra:
            extra["function_request_id"] = extra["request_id"]
        extra.update(getattr(record, "metric", None) or {})
        flat = copy.copy(record)
        for key in ("clarify_ids", "fields", "metric"):
            vars(flat).pop(key, None)
        vars(flat).update(extra)
        return super().format(flat)


class TextFormatter(logging.Formatter):
    """For people at a terminal: `12:00:01.234 INFO  logger: message  key=value ...`."""

    def format(self, record: logging.LogRecord) -> str:
        ids: dict[str, str] = dict(getattr(record, "clarify_ids", {}))
        ids.update({k: str(v) for k, v in (getattr(record, "fields", None) or {}).items()})
        metric = getattr(record, "metric", None)
        if metric:
            ids.update({k: str(v) for k, v in metric.items() if k not in ("_aws", "service")})
        ordered = [k for k in ID_KEYS if k in ids] + sorted(k for k in ids if k not in ID_KEYS)
        clock = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        line = f"{clock} {record.levelname:<5} {record.name}: {record.getMessage()}"
        if ordered:
            line += "  " + " ".join(f"{k}={ids[k]}" for k in ordered)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """Ours, so configuring again replaces it instead of adding a second one."""


def configure(fmt: str | None = None, *, level: str | None = None, stream: TextIO | None = None) -> None:
    """Route every log record (and metric) of the process to one line each on `stream` (stdout).

    `fmt` json | text, else CLARIFY_LOG_FORMAT, else json; `level` else CLARIFY_LOG_LEVEL, else INFO.
    In Lambda the runtime's own handler is replaced, so a line is not written twice in two formats.
    """
    fmt = (fmt or os.environ.get("CLARIFY_LOG_FORMAT") or "json").lower()
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {FORMATS}")
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, _Handler) or os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
            root.removeHandler(h)
    handler = _Handler(stream or sys.stdout)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel((level or os.environ.get("CLARIFY_LOG_LEVEL") or "INFO").upper())
    # boto's own debug and info chatter is not ours to print
    for noisy in ("botocore", "boto3", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def configure_lambda() -> None:
    """Called at import: configures only inside a Lambda (locally, the process that runs the app decides)."""
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        configure()


# ------------------------------------------------------------------ metrics
def count(name: str, value: float = 1, **dimension: object) -> None:
    """Add `value` to the metric `name`; at most one breakdown dimension, e.g. count(ANSWERS, delivery="late")."""
    emit(name, value, "Count", **dimension)


def emit(name: str, value: float, unit: str, **dimension: object) -> None:
    """One EMF document: the metric under [service] and, with a breakdown, under [service, <dimension>]."""
    dims = _clean(dimension)
    if len(dims) > 1:
        raise ValueError(f"metric {name}: one breakdown dimension at most, got {sorted(dims)}")
    metrics = EphemeralMetrics(namespace=namespace(), service=service())
    metrics.add_metric(name=name, unit=unit, value=value)
    if dims:
        metrics.add_dimensions(service=service(), **dims)
    _metrics_log.info("metric %s", name, extra={"metric": metrics.serialize_metric_set()})


def long_poll(kind: str) -> Callable[[F], F]:
    """Counts each call of a long-poll and how long it held the invocation (LONG_POLL_WAITS / _SECONDS)."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                count(LONG_POLL_WAITS, kind=kind)
                emit(LONG_POLL_SECONDS, round(time.monotonic() - started, 3), "Seconds", kind=kind)
        return timed  # type: ignore[return-value]
    return wrap


# The reconciler report's counters that are also metrics of their own (every counter is a repair by kind).
REPORT_METRICS: dict[str, tuple[str, dict[str, str]]] = {
    "reservations_kept": (AMBIGUOUS_DISPATCHES, {"path": "reconciler"}),  # the process died after the marker
    "prompts_ambiguous": (AMBIGUOUS_DISPATCHES, {"path": "reconciler"}),
    "intents_restored": (RESTORES, {"cause": "reconciler"}),
    "watchdogs_fired": (WATCHDOG_FALLBACKS, {}),
}


def report_metrics(report: Any) -> None:
    """A reconciler run's counters: each non-zero one is RECONCILER_REPAIRS of its `kind`, and those in
    REPORT_METRICS also count as their own metric."""
    for kind, value in vars(report).items():
        if kind == "examined" or isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            continue
        count(RECONCILER_REPAIRS, value, kind=kind)
        if kind in REPORT_METRICS:
            name, dimension = REPORT_METRICS[kind]
            count(name, value, **dimension)
