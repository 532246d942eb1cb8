"""A user's response to a bundle: validated and normalised before any write (the claim stores this form)."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import ValidationError
from .model import Bundle, Question

MAX_TEXT = 2000


@dataclass(frozen=True)
class Answer:
    question_id: str
    selected_options: tuple[str, ...]
    custom_text: str

    def as_response(self) -> dict[str, Any]:
        return {"question_id": self.question_id, "selected_options": list(self.selected_options),
                "custom_text": self.custom_text}


@dataclass(frozen=True)
class Outcome:
    status: str  # answered | rejected
    answers: tuple[Answer, ...] = ()
    reject_reason: str = ""

    def response_for(self, question_id: str) -> dict[str, Any]:
        if self.status == "rejected":
            return {"question_id": question_id, "rejected": True, "reject_reason": self.reject_reason}
        answer = next(a for a in self.answers if a.question_id == question_id)
        return answer.as_response()

    @property
    def fingerprint(self) -> str:
        """Identity of the normalised body: the same answer in another order is the same response."""
        body = {"status": self.status, "answers": [a.as_response() for a in self.answers],
                "reject_reason": self.reject_reason}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def parse_response(body: Any, bundle: Bundle, row_ids: Sequence[str]) -> Outcome:
    """Exactly one answer per row in `row_ids` (the bundle's pending rows), known options, caps on raw text."""
    if not isinstance(body, Mapping):
        raise ValidationError("body", "the request body must be a JSON object")
    rejected = body.get("rejected", False)
    if not isinstance(rejected, bool):
        raise ValidationError("rejected", "rejected must be true or false")
    if rejected:
        if body.get("answers"):
            raise ValidationError("answers", "a rejection cannot carry answers")
        return Outcome(status="rejected", reject_reason=_text(body, "reject_reason"))
    raw = body.get("answers")
    if not isinstance(raw, list) or not raw:
        raise ValidationError("answers", "answers must be a non-empty list (or send rejected: true)")
    questions = {r.question.question_id: r.question for r in bundle.rows if r.question.question_id in row_ids}
    seen: dict[str, Answer] = {}
    for i, item in enumerate(raw):
        answer = _answer(item, f"answers[{i}]", questions)
        if answer.question_id in seen:
            raise ValidationError(f"answers[{i}].question_id", "each question is answered once")
        seen[answer.question_id] = answer
    missing = [q for q in row_ids if q not in seen]
    if missing:
        raise ValidationError("answers", f"missing answers for: {', '.join(missing)}")
    return Outcome(status="answered", answers=tuple(seen[q] for q in row_ids))


def _answer(item: Any, where: str, questions: Mapping[str, Question]) -> Answer:
    if not isinstance(item, Mapping):
        raise ValidationError(where, f"{where} must be an object")
    qid = item.get("question_id")
    if not isinstance(qid, str) or qid not in questions:
        raise ValidationError(f"{where}.question_id", "question_id must name a pending question of this bundle")
    question = questions[qid]
    selected = item.get("selected_options", [])
    if not isinstance(selected, list) or not all(isinstance(o, str) for o in selected):
        raise ValidationError(f"{where}.selected_options", "selected_options must be a list of option ids")
    order = [o.option_id for o in question.options]
    unknown = [o for o in selected if o not in order]
    if unknown:
        shown = ", ".join(o[:40] for o in unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
        raise ValidationError(f"{where}.selected_options", f"unknown option ids: {shown}")
    custom = _text(item, "custom_text", where)
    if not selected and not custom:
        raise ValidationError(where, f"{where} needs a selected option or custom_text")
    return Answer(question_id=qid, selected_options=tuple(o for o in order if o in set(selected)),
                  custom_text=custom)


def _text(data: Mapping[str, Any], name: str, where: str = "") -> str:
    field = f"{where}.{name}" if where else name
    value = data.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(field, f"{field} must be a string")
    if len(value) > MAX_TEXT:  # on the raw input: trimming never sneaks an over-long text through
        raise ValidationError(field, f"{field} must be at most {MAX_TEXT} characters")
    return value.strip()


def summary_text(bundle: Bundle, outcome_rows: Mapping[str, Mapping[str, Any]]) -> str:
    """The prompt that hands an answer to the agent: each question with the chosen labels or text."""
    lines = ["You previously asked the user:"]
    for row in bundle.rows:
        response = outcome_rows.get(row.question.question_id)
        if response is None:
            continue
        labels = {o.option_id: o.label for o in row.question.options}
        chosen = [labels.get(o, o) for o in response.get("selected_options", [])]
        if response.get("custom_text"):
            chosen.append(str(response["custom_text"]))
        lines.append(f"- {row.question.prompt}\n  Answer: {'; '.join(chosen) or '(no answer)'}")
    lines.append("Please continue with this information.")
    return "\n".join(lines)


@dataclass(frozen=True)
class LateAnswer:
    """Answers to a question the agent no longer waits for, carried by an ordinary message."""

    bundle_id: str
    context: Mapping[str, Any]  # each question's prompt with the chosen labels or text
    text: str


def late_answer(bundle: Bundle, raw: Any) -> LateAnswer:
    """Validate `in_reply_to.answers` against the bundle's unanswered questions and build the context."""
    rows = [r.question.question_id for r in bundle.rows if r.response is None]
    try:
        outcome = parse_response({"answers": raw.get("answers")}, bundle, rows)
    except ValidationError as exc:
        raise ValidationError(f"in_reply_to.{exc.field}", exc.message) from None
    responses = {a.question_id: a.as_response() for a in outcome.answers}
    questions = []
    for row in bundle.rows:
        response = responses.get(row.question.question_id)
        if response is None:
            continue
        labels = {o.option_id: o.label for o in row.question.options}
        questions.append({"question_id": row.question.question_id, "prompt": row.question.prompt,
                          "selected_labels": [labels[o] for o in response["selected_options"]],
                          "custom_text": response["custom_text"]})
    text = summary_text(bundle, responses).replace(
        "You previously asked the user:", "Answering your earlier question (sent as a new message):")
    return LateAnswer(bundle_id=bundle.id, context={"clarification_id": bundle.id, "questions": questions},
                      text=text)
