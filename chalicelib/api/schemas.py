"""Request shapes for the OpenAPI document: bodies, query parameters and headers of each route.

They describe what the services' validation accepts (the limits come from the same constants), so clients
and OpenAPI-driven test generators know what a valid request looks like. The services stay the judge.
"""
from __future__ import annotations

from typing import Any

from ..domain import commands as c
from ..domain import devices as dev
from ..domain import validation as v
from ..services import paging
from . import boundary

Schema = dict[str, Any]
V1 = "/api/v1"
IDENTIFIER: Schema = {"type": "string", "minLength": 1, "maxLength": v.MAX_ID, "pattern": r"^[A-Za-z0-9_.:-]+$"}


def _text(max_len: int, min_len: int = 1) -> Schema:
    return {"type": "string", "minLength": min_len, "maxLength": max_len}


def _object(properties: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    schema: Schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


ANSWERS: Schema = {"type": "array", "minItems": 1, "maxItems": c.MAX_QUESTIONS, "items": _object({
    "question_id": IDENTIFIER,
    "selected_options": {"type": "array", "maxItems": c.MAX_OPTIONS, "items": IDENTIFIER},
    "custom_text": _text(c.MAX_ANSWER_TEXT, 0),
}, ("question_id",))}

OPTION = _object({"option_id": IDENTIFIER, "label": _text(c.MAX_LABEL),
                  "description": _text(c.MAX_DESCRIPTION, 0)}, ("label",))
QUESTION = _object({
    "question_id": IDENTIFIER, "title": _text(c.MAX_LABEL, 0), "prompt": _text(c.MAX_PROMPT),
    "options": {"type": "array", "minItems": c.MIN_OPTIONS, "maxItems": c.MAX_OPTIONS, "items": OPTION},
}, ("prompt", "options"))
FRAME = _object({
    "type": {"type": "string", "enum": list(c.FRAME_TYPES)},
    "execution_id": _text(v.MAX_ID, 0), "prompt_generation": {"type": "integer", "minimum": 0},
    "turn_id": IDENTIFIER, "content": _text(v.MAX_CONTENT, 0),
    "state": {"type": "string", "enum": ["CREATED", "STARTING", "RUNNING", "IDLE", "WAITING_FOR_INPUT",
                                         "COMPLETED", "FAILED", "CANCELLED"]},
}, ("type",))

# (method, path) -> JSON body schema
BODIES: dict[tuple[str, str], Schema] = {
    ("POST", V1 + "/tasks"): _object({"title": _text(v.MAX_TITLE), "workflow_step": IDENTIFIER}, ("title",)),
    ("PATCH", V1 + "/tasks/{task_id}"): _object({"title": _text(v.MAX_TITLE)}, ("title",)),
    ("POST", V1 + "/tasks/{task_id}/sessions"): _object({"prompt": _text(v.MAX_CONTENT),
                                                          "primary": {"type": "boolean"}}),
    ("POST", V1 + "/sessions/{session_id}/messages"): _object({
        "client_message_id": IDENTIFIER, "content": _text(v.MAX_CONTENT),
        "delivery": {"type": "string", "enum": ["auto", "steer", "queue"]},
        "in_reply_to": _object({"clarification_id": {"type": "string"}, "answers": ANSWERS}, ("answers",)),
    }, ("client_message_id",)),
    ("POST", V1 + "/tasks/{task_id}/workflow/transition"): _object({"to_step": IDENTIFIER}, ("to_step",)),
    ("POST", V1 + "/clarifications/{clarification_id}/respond"): _object({
        "answers": ANSWERS, "rejected": {"type": "boolean"}, "reject_reason": _text(c.MAX_ANSWER_TEXT, 0)}),
    ("POST", V1 + "/agent/sessions/{session_id}/clarifications"): _object({
        "questions": {"type": "array", "minItems": 1, "maxItems": c.MAX_QUESTIONS, "items": QUESTION},
        "context": _text(c.MAX_CONTEXT, 0), "turn_id": IDENTIFIER,
    }, ("questions",)),
    ("POST", V1 + "/agent/clarifications/{clarification_id}/confirm"): _object({"delivery_id": IDENTIFIER},
                                                                               ("delivery_id",)),
    ("POST", V1 + "/devices"): _object({
        "endpoint": {"type": "string", "minLength": 1, "maxLength": dev.MAX_ENDPOINT, "pattern": "^https?://"},
        "keys": _object({"p256dh": {"type": "string", "pattern": "^[A-Za-z0-9_-]{86,88}=*$"},
                         "auth": {"type": "string", "pattern": "^[A-Za-z0-9_-]{22}=*$"}}, ("p256dh", "auth")),
        "label": _text(dev.MAX_LABEL, 0),
    }, ("endpoint", "keys")),
    ("POST", V1 + "/agent/sessions/{session_id}/frames"): _object({
        "frames": {"type": "array", "minItems": 1, "maxItems": v.MAX_FRAMES, "items": FRAME}}, ("frames",)),
}


def _param(name: str, where: str, schema: Schema, description: str) -> Schema:
    return {"name": name, "in": where, "required": False, "schema": schema, "description": description}


def _page(cursor: str, bounds: tuple[int, int], what: str) -> list[Schema]:
    return [_param("limit", "query", {"type": "integer", "minimum": 1, "maximum": bounds[1], "default": bounds[0]},
                   f"{what} per page"),
            _param(cursor, "query", {"type": "string", "maxLength": paging.MAX_CURSOR},
                   "the cursor of the page you hold (`next_cursor` or `older_cursor`); none: the newest page")]


PARAMETERS: dict[tuple[str, str], list[Schema]] = {
    ("GET", V1 + "/tasks"): _page("cursor", paging.TASKS_PAGE, "tasks"),
    ("GET", V1 + "/tasks/{task_id}/sessions"): _page("cursor", paging.SESSIONS_PAGE, "sessions"),
    ("GET", V1 + "/sessions/{session_id}/transcript"): _page("before", paging.TRANSCRIPT_PAGE, "messages"),
    ("GET", V1 + "/sessions/{session_id}/turns"): _page("before", paging.TURNS_PAGE, "turns"),
    ("GET", V1 + "/events"): [
        _param("after", "query", {"type": "string", "maxLength": 1024},
               "a cursor from an earlier page, or `now`"),
        _param("wait", "query", {"type": "integer", "minimum": 0, "maximum": 25},
               "seconds to wait for an event when there is none"),
    ],
    ("GET", V1 + "/agent/clarifications/{clarification_id}/wait"): [
        _param("timeout", "query", {"type": "integer", "minimum": 0, "maximum": 25},
               "seconds to wait for an outcome"),
    ],
    ("POST", V1 + "/clarifications/{clarification_id}/respond"): [
        _param("Idempotency-Key", "header", IDENTIFIER, "a retry with the same key gets the original result"),
    ],
}


def request_body(method: str, path: str) -> Schema | None:
    schema = BODIES.get((method, path))
    if schema is None:
        return None
    return {"required": True, "description": f"JSON, at most {boundary.MAX_BODY_BYTES} bytes",
            "content": {"application/json": {"schema": schema}}}


def parameters(method: str, path: str) -> list[Schema]:
    return list(PARAMETERS.get((method, path), []))
