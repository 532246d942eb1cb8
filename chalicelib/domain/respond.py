"""A user's response checked against its bundle and normalised before any write (the claim stores this form)."""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .commands import AnswerInput, Respond
from .errors import ValidationError
from .model import Bundle


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


def outcome(command: Respond, bundle: Bundle, row_ids: Sequence[str], field: str = "answers") -> Outcome:
    """The command checked against the bundle: exactly one answer per row in `row_ids` (its pending rows),
    options the question offers, a choice or text for each."""
    if command.rejected:
        return Outcome(status="rejected", reject_reason=command.reject_reason)
    questions = {r.question.question_id: r.question for r in bundle.rows if r.question.question_id in row_ids}
    seen: dict[str, Answer] = {}
    for i, item in enumerate(command.answers):
        where = f"{field}[{i}]"
        question = questions.get(item.question_id)
        if question is None:
            raise ValidationError(f"{where}.question_id", "question_id must name a pending question of this bundle")
        order = [o.option_id for o in question.options]
        unknown = [o for o in item.selected_options if o not in order]
        if unknown:
            raise ValidationError(f"{where}.selected_options", f"unknown option ids: {', '.join(unknown[:6])}")
        if not item.selected_options and not item.custom_text:
            raise ValidationError(where, f"{where} needs a selected option or custom_text")
        seen[item.question_id] = Answer(question_id=item.question_id, custom_text=item.custom_text,
                                        selected_options=tuple(o for o in order if o in item.selected_options))
    missing = [q for q in row_ids if q not in seen]
    if missing:
        raise ValidationError(field, f"missing answers for: {', '.join(missing)}")
    return Outcome(status="answered", answers=tuple(seen[q] for q in row_ids))


def skip_text(reason: str) -> str:
    """The prompt that hands a Skip to the agent (when the watchdog re-prompts it): the user's reason, if any,
    is part of the answer."""
    why = f" Their reason: {reason.strip()}" if reason.strip() else ""
    return f"The user skipped your question.{why} Continue without that information."


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


def late_answer(bundle: Bundle, answers: tuple[AnswerInput, ...]) -> LateAnswer:
    """Validate `in_reply_to.answers` against the bundle's unanswered questions and build the context."""
    rows = [r.question.question_id for r in bundle.rows if r.response is None]
    result = outcome(Respond(answers=answers), bundle, rows, field="in_reply_to.answers")
    responses = {a.question_id: a.as_response() for a in result.answers}
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
