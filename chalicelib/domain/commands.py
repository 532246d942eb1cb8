"""Typed commands: each request body is validated into one of these before any service runs.

Every error names the first bad field; nothing is written before parsing passed. What can only be checked
against stored state (which questions a bundle has, which options) is checked by the service.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import validation as v
from .errors import ValidationError
from .model import Option, Question, State

MIN_QUESTIONS, MAX_QUESTIONS, MIN_OPTIONS, MAX_OPTIONS = 1, 4, 2, 6
MAX_PROMPT, MAX_LABEL, MAX_DESCRIPTION, MAX_CONTEXT = 2000, 200, 1000, 4000
MAX_ANSWER_TEXT = 2000
FRAME_TYPES = ("message", "thinking", "tool", "cancel_ack", "ready", "turn_completed", "state")
DELIVERIES = ("auto", "steer", "queue")


@dataclass(frozen=True)
class CreateTask:
    title: str
    workflow_step: str


@dataclass(frozen=True)
class RenameTask:
    title: str


@dataclass(frozen=True)
class CreateSession:
    prompt: str | None
    primary: bool


@dataclass(frozen=True)
class AnswerInput:
    """One answer as sent: checked against the bundle's questions by the service."""

    question_id: str
    selected_options: tuple[str, ...]
    custom_text: str


@dataclass(frozen=True)
class Respond:
    answers: tuple[AnswerInput, ...] = ()
    rejected: bool = False
    reject_reason: str = ""


@dataclass(frozen=True)
class ReplyTo:
    clarification_id: str
    answers: tuple[AnswerInput, ...]


@dataclass(frozen=True)
class SendMessage:
    client_message_id: str
    content: str
    delivery: str = "auto"
    in_reply_to: ReplyTo | None = None


@dataclass(frozen=True)
class Transition:
    to_step: str


@dataclass(frozen=True)
class Ask:
    questions: tuple[Question, ...]
    context: str = ""
    turn_id: str | None = None


@dataclass(frozen=True)
class Confirm:
    delivery_id: str


@dataclass(frozen=True)
class Frame:
    type: str
    execution_id: str
    prompt_generation: int | None
    turn_id: str | None
    content: str
    state: State | None


# ------------------------------------------------------------------ users
def create_task(body: Any) -> CreateTask:
    data = v.body_object(body)
    title = v.text(data, "title", max_len=v.MAX_TITLE)
    assert title is not None
    return CreateTask(title=title, workflow_step=v.identifier(data, "workflow_step", required=False) or "todo")


def rename_task(body: Any) -> RenameTask:
    title = v.text(v.body_object(body), "title", max_len=v.MAX_TITLE)
    assert title is not None
    return RenameTask(title)


def create_session(body: Any) -> CreateSession:
    data = v.body_object(body if body is not None else {})
    return CreateSession(prompt=v.text(data, "prompt", max_len=v.MAX_CONTENT, required=False) or None,
                         primary=v.boolean(data, "primary", default=False))


def transition(body: Any) -> Transition:
    step = v.identifier(v.body_object(body), "to_step")
    assert step is not None
    return Transition(step)


def respond(body: Any) -> Respond:
    data = v.body_object(body)
    rejected = data.get("rejected", False)
    if not isinstance(rejected, bool):
        raise ValidationError("rejected", "rejected must be true or false")
    if rejected:
        if data.get("answers"):
            raise ValidationError("answers", "a rejection cannot carry answers")
        return Respond(rejected=True, reject_reason=_answer_text(data, "reject_reason", "reject_reason"))
    return Respond(answers=answers(data.get("answers"), "answers"))


def answers(raw: Any, field: str) -> tuple[AnswerInput, ...]:
    if not isinstance(raw, list) or not raw:
        raise ValidationError(field, f"{field} must be a non-empty list (or send rejected: true)")
    if len(raw) > MAX_QUESTIONS:
        raise ValidationError(field, f"{field} holds at most {MAX_QUESTIONS} answers")
    out: list[AnswerInput] = []
    for i, item in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(item, Mapping):
            raise ValidationError(where, f"{where} must be an object")
        qid = item.get("question_id")
        if not isinstance(qid, str) or not qid:
            raise ValidationError(f"{where}.question_id", "question_id must be a non-empty string")
        if len(qid) > v.MAX_ID:
            raise ValidationError(f"{where}.question_id", f"question_id must be at most {v.MAX_ID} characters")
        if any(a.question_id == qid for a in out):
            raise ValidationError(f"{where}.question_id", "each question is answered once")
        selected = item.get("selected_options", [])
        if (not isinstance(selected, list) or len(selected) > MAX_OPTIONS
                or not all(isinstance(o, str) and len(o) <= v.MAX_ID for o in selected)):
            raise ValidationError(f"{where}.selected_options",
                                  f"selected_options must be a list of at most {MAX_OPTIONS} option ids")
        out.append(AnswerInput(qid, tuple(dict.fromkeys(selected)),
                               _answer_text(item, "custom_text", f"{where}.custom_text")))
    return tuple(out)


def _answer_text(data: Mapping[str, Any], name: str, field: str) -> str:
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(field, f"{field} must be a string")
    if len(value) > MAX_ANSWER_TEXT:  # on the raw input: trimming never sneaks an over-long text through
        raise ValidationError(field, f"{field} must be at most {MAX_ANSWER_TEXT} characters")
    return value.strip()


def idempotency_key(raw: str | None) -> str:
    """The Idempotency-Key header ("" when absent)."""
    if raw is None or raw == "":
        return ""
    return v.identifier({"Idempotency-Key": raw}, "Idempotency-Key") or ""


def send_message(body: Any) -> SendMessage:
    data = v.body_object(body)
    client_message_id = v.identifier(data, "client_message_id")
    assert client_message_id is not None
    reply = data.get("in_reply_to")
    if reply is not None and not isinstance(reply, Mapping):
        raise ValidationError("in_reply_to", "in_reply_to must be an object")
    content = v.text(data, "content", max_len=v.MAX_CONTENT, required=reply is None, allow_empty=reply is not None)
    delivery = v.choice(data, "delivery", DELIVERIES, "auto")
    in_reply_to = None
    if reply is not None:
        cid = reply.get("clarification_id")
        if not isinstance(cid, str) or not cid or len(cid) > 2 * v.MAX_ID:
            raise ValidationError("in_reply_to.clarification_id", "not a question of this session")
        in_reply_to = ReplyTo(cid, answers(reply.get("answers"), "in_reply_to.answers"))
    return SendMessage(client_message_id, content or "", delivery, in_reply_to)


# ------------------------------------------------------------------ agents
def ask(body: Any) -> Ask:
    data = v.body_object(body)
    raw = data.get("questions")
    if not isinstance(raw, list) or not MIN_QUESTIONS <= len(raw) <= MAX_QUESTIONS:
        raise ValidationError("questions", f"questions must be a list of {MIN_QUESTIONS} to {MAX_QUESTIONS}")
    taken = {q.get("question_id") for q in raw if isinstance(q, Mapping)}
    fresh = (f"q{n}" for n in range(1, 100) if f"q{n}" not in taken)
    questions = tuple(_question(q, i, fresh) for i, q in enumerate(raw))
    if len({q.question_id for q in questions}) != len(questions):
        raise ValidationError("questions", "question ids must be unique")
    context = v.text(data, "context", max_len=MAX_CONTEXT, required=False, allow_empty=True) or ""
    return Ask(questions=questions, context=context, turn_id=v.identifier(data, "turn_id", required=False))


def _question(raw: Any, index: int, fresh: Iterator[str]) -> Question:
    """Generated ids never collide with ids the agent chose for other questions or options."""
    where = f"questions[{index}]"
    if not isinstance(raw, Mapping):
        raise ValidationError(where, f"{where} must be an object")
    qid = _id(raw, "question_id", where) or next(fresh)
    prompt = _str(raw, "prompt", where, MAX_PROMPT, required=True)
    title = _str(raw, "title", where, MAX_LABEL, required=False) or ""
    options_raw = raw.get("options")
    if not isinstance(options_raw, list) or not MIN_OPTIONS <= len(options_raw) <= MAX_OPTIONS:
        raise ValidationError(f"{where}.options", f"options must be a list of {MIN_OPTIONS} to {MAX_OPTIONS}")
    taken = {o.get("option_id") for o in options_raw if isinstance(o, Mapping)}
    fresh_options = (f"{qid}_opt{n}" for n in range(1, 100) if f"{qid}_opt{n}" not in taken)
    options = tuple(_option(o, f"{where}.options[{j}]", fresh_options) for j, o in enumerate(options_raw))
    if len({o.option_id for o in options}) != len(options):
        raise ValidationError(f"{where}.options", "option ids must be unique within a question")
    return Question(question_id=qid, title=title, prompt=prompt or "", options=options)


def _option(raw: Any, where: str, fresh: Iterator[str]) -> Option:
    if not isinstance(raw, Mapping):
        raise ValidationError(where, f"{where} must be an object")
    return Option(option_id=_id(raw, "option_id", where) or next(fresh),
                  label=_str(raw, "label", where, MAX_LABEL, required=True) or "",
                  description=_str(raw, "description", where, MAX_DESCRIPTION, required=False) or "")


def _id(raw: Mapping[str, Any], name: str, where: str) -> str | None:
    """An agent-chosen id: a stored map key, so only letters, digits and - _ . : (absent → generated)."""
    value = raw.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return v.identifier(raw, name, required=False) or None
    except ValidationError as exc:
        raise ValidationError(f"{where}.{name}", exc.message) from None


def _str(raw: Mapping[str, Any], name: str, where: str, max_len: int, *, required: bool) -> str | None:
    try:
        return v.text(raw, name, max_len=max_len, required=required)
    except ValidationError as exc:
        raise ValidationError(f"{where}.{name}", exc.message.replace(name, f"{where}.{name}", 1)) from None


def confirm(body: Any) -> Confirm:
    delivery_id = v.identifier(v.body_object(body), "delivery_id")
    assert delivery_id is not None
    return Confirm(delivery_id)


def frames(body: Any) -> tuple[Frame, ...]:
    data = v.body_object(body)
    raw = data.get("frames")
    if not isinstance(raw, list) or not raw:
        raise ValidationError("frames", "frames must be a non-empty list")
    if len(raw) > v.MAX_FRAMES:
        raise ValidationError("frames", f"at most {v.MAX_FRAMES} frames per request")
    return tuple(_frame(item, f"frames[{i}]") for i, item in enumerate(raw))


def _frame(item: Any, where: str) -> Frame:
    if not isinstance(item, Mapping):
        raise ValidationError(where, f"{where} must be an object")
    kind = item.get("type")
    if kind not in FRAME_TYPES:
        raise ValidationError(f"{where}.type", f"{where}.type must be one of {', '.join(FRAME_TYPES)}")
    generation = item.get("prompt_generation")
    if generation is not None and (not isinstance(generation, int) or isinstance(generation, bool)
                                   or not 0 <= generation < 2 ** 53):
        raise ValidationError(f"{where}.prompt_generation", "prompt_generation must be a non-negative integer")
    for name in ("execution_id", "turn_id"):
        value = item.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > v.MAX_ID):
            raise ValidationError(f"{where}.{name}", f"{name} must be a string of at most {v.MAX_ID} characters")
    content = item.get("content", "")
    if not isinstance(content, str) or len(content) > v.MAX_CONTENT:
        raise ValidationError(f"{where}.content", f"content must be a string of at most {v.MAX_CONTENT} characters")
    state = None
    if kind == "state":
        try:
            state = State(str(item.get("state")))
        except ValueError:
            raise ValidationError(f"{where}.state", "state must be a session state") from None
    return Frame(type=kind, execution_id=item.get("execution_id") or "", prompt_generation=generation,
                 turn_id=item.get("turn_id") or None, content=content, state=state)
