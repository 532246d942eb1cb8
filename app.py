"""Clarify: wiring only. Each view parses, calls one service function, and returns."""
from __future__ import annotations

import os
from typing import Any, cast

from chalice import AuthResponse, Chalice, Rate

from chalicelib import observability as obs
from chalicelib.api import cors
from chalicelib.api.http import Api, json_response
from chalicelib.api.openapi import openapi_document
from chalicelib.auth.identity import LOCAL_STAGE
from chalicelib.auth.tokens import Caller
from chalicelib.bootstrap import authenticator, deps, sign_in_config, stage
from chalicelib.domain import commands
from chalicelib.domain import public as views
from chalicelib.domain import validation as v
from chalicelib.domain.clarify import dismissal_key
from chalicelib.domain.errors import Unauthorized
from chalicelib.functions import reconciler, streams
from chalicelib.services import (
    clarifications,
    devices,
    feed,
    frames,
    history,
    messages,
    paging,
    push,
    responses,
    sessions,
    stream_health,
    task_changes,
    tasks,
    workflow,
)
from chalicelib.services.deps import Deps

obs.configure_lambda()
app = Chalice(app_name="clarify")
api = Api(app)
V1 = "/api/v1"
# Bodies are parsed as JSON whatever their declared type, so a wrong or missing Content-Type gets our 400
# envelope naming the body instead of the framework's own 415.
ANY_BODY = cast("list[str]", [])  # chalice package analyses this module: keep builtins out of annotations
STREAM_PLACEHOLDER = "arn:aws:dynamodb:us-east-1:000000000000:table/{table}/stream/placeholder"


@app.authorizer(ttl_seconds=0)
def bearer(auth_request: Any) -> AuthResponse:
    """Who is calling (chalicelib/auth/identity.py); a bad token is denied (the gateway answers 401 in our error
    envelope)."""
    try:
        caller = authenticator().caller(auth_request.token or "")
    except Unauthorized:
        return AuthResponse(routes=[], principal_id="anonymous")
    return AuthResponse(routes=["*"], principal_id=caller.sub, context=caller.as_context())


def _limit(d: Deps, name: str, bounds: tuple[int, int]) -> int:
    """A page size from the query string: 1 to the list's most, its default when absent."""
    return v.integer(api.query(name), name, default=bounds[0], low=1, high=bounds[1])


# ------------------------------------------------------------------ health and contract
@app.route(V1 + "/health", methods=["GET"])
def health() -> Any:
    return json_response(*stream_health.health(deps()))


@app.route(V1 + "/auth/config", methods=["GET"])
def auth_config() -> Any:
    return json_response(200, sign_in_config())


@app.route(V1 + "/openapi.json", methods=["GET"])
def openapi() -> Any:
    return json_response(200, openapi_document(app))


# ------------------------------------------------------------------ CORS (configured origins only)
@app.middleware("http")
def cors_headers(event: Any, get_response: Any) -> Any:
    response = get_response(event)
    response.headers.update(cors.response_headers(event.headers.get("origin")))
    return response


# ------------------------------------------------------------------ tasks
@app.route(V1 + "/tasks",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def create_task(d: Deps, caller: Caller) -> tuple[int, Any]:
    return 201, views.task_view(tasks.create_task(d, caller, commands.create_task(api.body())))


@app.route(V1 + "/tasks", methods=["GET"], authorizer=bearer)
@api.endpoint
def list_tasks(d: Deps, caller: Caller) -> tuple[int, Any]:
    page = tasks.list_tasks(d, caller, limit=_limit(d, "limit", paging.TASKS_PAGE), cursor=api.query("cursor"))
    return 200, {"tasks": [views.task_view(t.task, t.last_activity_at) for t in page.tasks],
                 "next_cursor": page.next_cursor}


@app.route(V1 + "/tasks/{task_id}", methods=["GET"], authorizer=bearer)
@api.endpoint
def get_task(d: Deps, caller: Caller, task_id: str) -> tuple[int, Any]:
    return 200, views.task_view(tasks.get_task(d, caller, task_id))


@app.route(V1 + "/tasks/{task_id}", methods=["PATCH"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def rename_task(d: Deps, caller: Caller, task_id: str) -> tuple[int, Any]:
    return 200, views.task_view(task_changes.rename_task(d, caller, task_id, commands.rename_task(api.body())))


@app.route(V1 + "/tasks/{task_id}", methods=["DELETE"], authorizer=bearer)
@api.endpoint
def delete_task(d: Deps, caller: Caller, task_id: str) -> tuple[int, Any]:
    task_changes.delete_task(d, caller, task_id)
    return 204, None


# ------------------------------------------------------------------ sessions
@app.route(V1 + "/tasks/{task_id}/sessions",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def create_session(d: Deps, caller: Caller, task_id: str) -> tuple[int, Any]:
    created = sessions.create_session(d, caller, task_id, commands.create_session(api.body()))
    body = views.session_view(created.session)
    if created.admission:
        body["admission"] = created.admission.as_dict()
    return 201, body


@app.route(V1 + "/tasks/{task_id}/sessions", methods=["GET"], authorizer=bearer)
@api.endpoint
def list_sessions(d: Deps, caller: Caller, task_id: str) -> tuple[int, Any]:
    listed, cursor = sessions.list_sessions(d, caller, task_id, limit=_limit(d, "limit", paging.SESSIONS_PAGE),
                                            cursor=api.query("cursor"))
    return 200, {"sessions": [views.session_view(s) for s in listed], "next_cursor": cursor}


@app.route(V1 + "/sessions/{session_id}", methods=["GET"], authorizer=bearer)
@api.endpoint
def get_session(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    return 200, views.session_view(sessions.get_session(d, caller, session_id))


@app.route(V1 + "/sessions/{session_id}/cancel",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def cancel_session(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    return 200, views.session_view(sessions.cancel_session(d, caller, session_id))


@app.route(V1 + "/sessions/{session_id}/messages",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def send_message(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    command = commands.send_message(api.body())
    admission = messages.send_message(d, caller, session_id, command)
    if command.in_reply_to is not None and not admission.replayed:
        obs.count(obs.ANSWERS, delivery="late")
    return (200 if admission.replayed else 201), admission.as_dict()


@app.route(V1 + "/sessions/{session_id}/transcript", methods=["GET"], authorizer=bearer)
@api.endpoint
def transcript(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    result = history.transcript(d, caller, session_id, limit=_limit(d, "limit", paging.TRANSCRIPT_PAGE),
                                before=api.query("before"))
    return 200, views.transcript_view(result.session, result.messages, now=d.now(),
                                      viewer_key=dismissal_key(caller.sub), older_cursor=result.older_cursor,
                                      pending=result.pending)


@app.route(V1 + "/sessions/{session_id}/messages/{message_id}", methods=["DELETE"], authorizer=bearer)
@api.endpoint
def delete_message(d: Deps, caller: Caller, session_id: str, message_id: str) -> tuple[int, Any]:
    history.delete_message(d, caller, session_id, message_id)
    return 204, None


@app.route(V1 + "/tasks/{task_id}/workflow/transition",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def workflow_transition(d: Deps, caller: Caller, task_id: str) -> tuple[int, Any]:
    return 200, views.task_view(workflow.transition(d, caller, task_id, commands.transition(api.body())))


@app.route(V1 + "/sessions/{session_id}/turns", methods=["GET"], authorizer=bearer)
@api.endpoint
def turns(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    records, older = history.turns(d, caller, session_id, limit=_limit(d, "limit", paging.TURNS_PAGE),
                                   before=api.query("before"))
    return 200, {"turns": [views.turn_view(t) for t in records], "older_cursor": older}


# ------------------------------------------------------------------ responses
@app.route(V1 + "/clarifications/{clarification_id}/respond",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def respond(d: Deps, caller: Caller, clarification_id: str) -> tuple[int, Any]:
    result = responses.respond(d, caller, clarification_id, commands.respond(api.body()),
                               commands.idempotency_key(api.header("Idempotency-Key")))
    obs.count(obs.ANSWERS, delivery=result.delivery)
    return 200, result.as_dict()


@app.route(V1 + "/clarifications/{clarification_id}/dismiss",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def dismiss(d: Deps, caller: Caller, clarification_id: str) -> tuple[int, Any]:
    return 200, responses.dismiss(d, caller, clarification_id)


# ------------------------------------------------------------------ events
@app.route(V1 + "/events", methods=["GET"], authorizer=bearer)
@api.endpoint
def events(d: Deps, caller: Caller) -> tuple[int, Any]:
    wait = v.integer(api.query("wait"), "wait", default=0, low=0, high=d.settings.max_event_wait)
    page = feed.list_events(d, caller, api.query("after"), wait)
    return 200, {"events": [views.event_view(e) for e in page.events], "cursor": page.cursor}


# ------------------------------------------------------------------ push devices (Web Push)
@app.route(V1 + "/push/config", methods=["GET"], authorizer=bearer)
@api.endpoint
def push_config(d: Deps, caller: Caller) -> tuple[int, Any]:
    return 200, devices.push_config(d, caller)


@app.route(V1 + "/devices", methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def register_device(d: Deps, caller: Caller) -> tuple[int, Any]:
    view, created = devices.register(d, caller, api.body(), local=stage() == LOCAL_STAGE)
    return (201 if created else 200), view


@app.route(V1 + "/devices", methods=["GET"], authorizer=bearer)
@api.endpoint
def list_devices(d: Deps, caller: Caller) -> tuple[int, Any]:
    return 200, {"devices": devices.list_devices(d, caller)}


@app.route(V1 + "/devices/{device_id}", methods=["DELETE"], authorizer=bearer)
@api.endpoint
def delete_device(d: Deps, caller: Caller, device_id: str) -> tuple[int, Any]:
    devices.delete(d, caller, device_id)
    return 204, None


# ------------------------------------------------------------------ agent routes
@app.route(V1 + "/agent/sessions/{session_id}/frames",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def post_frames(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    return 200, vars(frames.apply_frames(d, caller, session_id, commands.frames(api.body())))


@app.route(V1 + "/agent/sessions/{session_id}/clarifications",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def ask(d: Deps, caller: Caller, session_id: str) -> tuple[int, Any]:
    bundle = clarifications.ask(d, caller, session_id, commands.ask(api.body()))
    return 201, {"clarification_id": bundle.id, "turn_id": bundle.turn_id,
                 "question_ids": [r.question.question_id for r in bundle.rows]}


@app.route(V1 + "/agent/clarifications/{clarification_id}/wait", methods=["GET"], authorizer=bearer)
@api.endpoint
def wait(d: Deps, caller: Caller, clarification_id: str) -> tuple[int, Any]:
    timeout = v.integer(api.query("timeout"), "timeout", default=d.settings.max_waiter_poll, low=0,
                        high=d.settings.max_waiter_poll)
    return responses.wait(d, caller, clarification_id, timeout)


@app.route(V1 + "/agent/clarifications/{clarification_id}/confirm",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def confirm(d: Deps, caller: Caller, clarification_id: str) -> tuple[int, Any]:
    return 200, responses.confirm(d, caller, clarification_id, commands.confirm(api.body()))


@app.route(V1 + "/agent/clarifications/{clarification_id}/detach",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def detach(d: Deps, caller: Caller, clarification_id: str) -> tuple[int, Any]:
    return 200, {"detached_question_ids": clarifications.detach(d, caller, clarification_id)}


@app.route(V1 + "/agent/clarifications/{clarification_id}/cancel",
           methods=["POST"], authorizer=bearer, content_types=ANY_BODY)
@api.endpoint
def cancel_clarification(d: Deps, caller: Caller, clarification_id: str) -> tuple[int, Any]:
    rows = clarifications.cancel(d, caller, clarification_id)
    return 200, {"clarification_id": clarification_id, "cancelled_question_ids": rows}


# ------------------------------------------------------------------ stream, schedule and reconciler functions
def _stream_arn(table: str) -> str:
    # Replaced by the table's StreamArn when scripts/package merges infra/ into the template.
    return os.environ.get(f"CLARIFY_{table.upper()}_STREAM_ARN", STREAM_PLACEHOLDER.format(table=table))


@app.on_dynamodb_record(stream_arn=_stream_arn("sessions"), batch_size=100, starting_position="TRIM_HORIZON",
                        name="sessions_stream")
@obs.invocation("sessions_stream")
def sessions_stream(event: Any) -> dict[str, Any]:
    return streams.process_batch(deps(), (r.to_dict() for r in event), streams.on_session_record)


@app.on_dynamodb_record(stream_arn=_stream_arn("history"), batch_size=100, starting_position="TRIM_HORIZON",
                        name="history_stream")
@obs.invocation("history_stream")
def history_stream(event: Any) -> dict[str, Any]:
    return streams.process_batch(deps(), (r.to_dict() for r in event), streams.on_history_record)


@app.on_dynamodb_record(stream_arn=_stream_arn("tasks"), batch_size=100, starting_position="TRIM_HORIZON",
                        name="tasks_stream")
@obs.invocation("tasks_stream")
def tasks_stream(event: Any) -> dict[str, Any]:
    return streams.process_batch(deps(), (r.to_dict() for r in event), streams.on_task_record)


@app.lambda_function(name="reconcile_before_traffic")
@obs.invocation("reconcile_before_traffic")
def reconcile_before_traffic(event: Any, context: Any) -> dict[str, Any]:
    """Invoked by the deploy (and the local run command) before the API takes traffic."""
    return reconciler.reconcile(deps(), before_traffic=True).as_dict()


@app.lambda_function(name="push_delivery")
@obs.invocation("push_delivery")
def push_delivery(event: Any, context: Any) -> dict[str, Any]:
    """A target of the pending-question rule (infra/bus.py): Web Push to the workspace's devices. Devices still
    unreached fail the invocation, so Lambda delivers the event again; pushed ones are skipped then."""
    report = push.deliver(deps(), (event or {}).get("detail") or {})
    if report.failed:
        raise push.PushIncomplete(f"{len(report.failed)} device(s) not reached yet: {report.as_dict()}")
    return report.as_dict()


@app.schedule(Rate(1, unit=Rate.MINUTES), name="reconcile_scheduled")
@obs.invocation("reconcile_scheduled")
def reconcile_scheduled(event: Any) -> dict[str, Any]:
    return reconciler.reconcile(deps(), before_traffic=False).as_dict()
