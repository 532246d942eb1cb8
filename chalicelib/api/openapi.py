"""The OpenAPI document the app serves, built from the Chalice route table plus a summary per route."""
from __future__ import annotations

import re
from typing import Any

from chalice import Chalice

from . import boundary, schemas

# (method, path) -> (summary, success status). A route missing here fails tests/unit/test_openapi.py.
SUMMARIES: dict[tuple[str, str], tuple[str, int]] = {
    ("GET", "/api/v1/health"): ("Readiness: 200 once the reconciler succeeded, else 503 not_ready", 200),
    ("GET", "/api/v1/openapi.json"): ("This document", 200),
    ("GET", "/api/v1/auth/config"): (
        "How to sign in: the user pool's app client and Cognito endpoint, whether development tokens work", 200),
    ("POST", "/api/v1/tasks"): ("Create a task {title}", 201),
    ("GET", "/api/v1/tasks"): (
        "A page of the workspace's tasks with their status summary (pending first, then the latest "
        "activity); `next_cursor` is null on the last page", 200),
    ("GET", "/api/v1/tasks/{task_id}"): ("Get a task", 200),
    ("PATCH", "/api/v1/tasks/{task_id}"): ("Rename a task {title}; other clients get task.updated", 200),
    ("DELETE", "/api/v1/tasks/{task_id}"): (
        "Delete a task: its live sessions are cancelled, then it is gone (404); other clients get task.deleted",
        204),
    ("POST", "/api/v1/tasks/{task_id}/sessions"): ("Create a session {prompt?, primary?}; starts the agent", 201),
    ("GET", "/api/v1/tasks/{task_id}/sessions"): ("A page of the task's sessions, newest first", 200),
    ("GET", "/api/v1/sessions/{session_id}"): ("Get a session", 200),
    ("POST", "/api/v1/sessions/{session_id}/cancel"): ("Cancel the session (terminal)", 200),
    ("POST", "/api/v1/sessions/{session_id}/messages"): (
        "Send a message {client_message_id, content, delivery?}: sent/queued/steered", 201),
    ("GET", "/api/v1/sessions/{session_id}/transcript"): (
        "A transcript page, the newest first and in order within it; `older_cursor` is null once the first "
        "message is included; `pending_clarifications` holds the session's active questions wherever they are",
        200),
    ("GET", "/api/v1/sessions/{session_id}/turns"): ("A page of the session's turns, paged like the transcript", 200),
    ("GET", "/api/v1/events"): (
        "The workspace's event feed ?after=<cursor>|now&wait=<s>; at-least-once, stable ids", 200),
    ("POST", "/api/v1/agent/sessions/{session_id}/frames"): ("Agent frames: output, completion, state", 200),
    ("DELETE", "/api/v1/sessions/{session_id}/messages/{message_id}"): (
        "Remove a transcript message (a clarification entry removes that bundle only)", 204),
    ("POST", "/api/v1/tasks/{task_id}/workflow/transition"): (
        "Move the task to {to_step}; 409 pending_clarification while a question is active", 200),
    ("POST", "/api/v1/agent/sessions/{session_id}/clarifications"): (
        "Ask a bundle of 1-4 questions in the current turn (starts one if none is open)", 201),
    ("POST", "/api/v1/agent/clarifications/{clarification_id}/detach"): (
        "The agent stopped waiting: detach the pending rows (empty list on repeat)", 200),
    ("POST", "/api/v1/clarifications/{clarification_id}/respond"): (
        "Answer or skip (rejected:true) the bundle; Idempotency-Key header; 409 clarification_inactive", 200),
    ("POST", "/api/v1/clarifications/{clarification_id}/dismiss"): (
        "Hide an inactive question's answer surface for this user (sends nothing)", 200),
    ("GET", "/api/v1/agent/clarifications/{clarification_id}/wait"): (
        "Long-poll ?timeout<=25 for a live outcome with its delivery_id; renews the waiter lease", 200),
    ("POST", "/api/v1/agent/clarifications/{clarification_id}/confirm"): (
        "Durably confirm a delivery {delivery_id} before using the answer; 409 if it was restored", 200),
    ("POST", "/api/v1/agent/clarifications/{clarification_id}/cancel"): (
        "The agent withdraws its pending question (that bundle only)", 200),
    ("GET", "/api/v1/push/config"): (
        "Web Push: the deployment's VAPID public key {vapid_public_key} (base64url, uncompressed P-256)", 200),
    ("POST", "/api/v1/devices"): (
        "Register this browser's PushSubscription {endpoint, keys:{p256dh, auth}, label?} -> {device_id}; "
        "the same endpoint again answers 200 with the same id", 201),
    ("GET", "/api/v1/devices"): ("The caller's own push devices (never their keys)", 200),
    ("DELETE", "/api/v1/devices/{device_id}"): ("Remove one of the caller's push devices", 204),
}

# What chalicelib.api.boundary accepts as an id in a path (anything else is 404).
PATH_ID = {"type": "string", "minLength": 1, "maxLength": boundary.MAX_PATH_ID, "pattern": boundary.PATH_ID.pattern}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message", "retryable"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"}, "retryable": {"type": "boolean"},
        "details": {"type": "object"}}}},
}


def openapi_document(app: Chalice) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for path, methods in sorted(app.routes.items()):
        for method, entry in sorted(methods.items()):
            summary, status = SUMMARIES.get((method, path), ("(undocumented)", 200))
            op: dict[str, Any] = {
                "operationId": entry.view_name,
                "summary": summary,
                "parameters": [{"name": p, "in": "path", "required": True, "schema": PATH_ID}
                               for p in re.findall(r"{(\w+)}", path)] + schemas.parameters(method, path),
                "responses": {str(status): {"description": "success"},
                              "4XX": {"description": "error", "content": {
                                  "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}},
            }
            body = schemas.request_body(method, path)
            if body is not None:
                op["requestBody"] = body
            if entry.authorizer is not None:
                op["security"] = [{"bearer": []}]
            paths.setdefault(path, {})[method.lower()] = op
    return {
        "openapi": "3.0.3",
        "info": {"title": "Clarify", "version": "1.0.0",
                 "description": "Durable clarification questions between AI coding agents and their users."},
        "paths": paths,
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}},
                       "schemas": {"Error": ERROR_SCHEMA}},
    }
