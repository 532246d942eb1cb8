"""What the API accepts, the stream can always process (issue 26): random Unicode (astral, combining, JSON
escapes, control characters) at every documented limit; every write the services accept succeeds, and every
stream record it causes is processed (none failed, none set aside). The in-memory store refuses any item,
derived ones included (history messages, feed events, archive records), by the bytes DynamoDB counts for the
form actually stored."""
from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from chalicelib.domain.commands import MAX_ANSWER_TEXT, MAX_CONTEXT, MAX_DESCRIPTION, MAX_LABEL, MAX_PROMPT
from chalicelib.domain.errors import DomainError
from chalicelib.domain.public import MAX_ENTRY_BYTES, clarification_view, entry_bytes
from chalicelib.domain.validation import MAX_CONTENT
from chalicelib.functions import streams
from chalicelib.services import archive, stream_health
from chalicelib.store.memory import MemoryStore
from tests.support.crash import SessionTap
from tests.support.world import World

HOSTILE = ["\U0001F600", "\U0001F468\u200D\U0001F469\u200D\U0001F467", "e\u0301", "\"", "\\", "\x01", "\n",
           "\u2028", "\uFFFF", "\U0010FFFF", "</script>"]
alphabets = st.lists(st.sampled_from(HOSTILE) | st.characters(exclude_categories=("Cs",)), min_size=1, max_size=6)


def text(alphabet: list[str], length: int) -> str:
    """Exactly `length` code points (the limits count code points) cycling through `alphabet`."""
    return "".join(itertools.islice(itertools.cycle("".join(alphabet)), length))


def max_bundle(a: list[str]) -> dict[str, Any]:
    return {"context": text(a, MAX_CONTEXT), "questions": [
        {"question_id": f"q{q}", "title": text(a, MAX_LABEL), "prompt": text(a, MAX_PROMPT),
         "options": [{"option_id": f"o{o}", "label": text(a, MAX_LABEL), "description": text(a, MAX_DESCRIPTION)}
                     for o in range(6)]} for q in range(4)]}


class Streamed(World):
    def __init__(self) -> None:
        super().__init__(SessionTap(MemoryStore()))
        self.fed = 0

    def stream(self) -> None:
        """Every new record through the stream function as Lambda hands it over: all must be processed."""
        while self.fed < len(self.store.changes):
            end = len(self.store.changes)
            records = [{**r, "eventName": "MODIFY", "eventSourceARN": "arn:aws:dynamodb:r:1:table/sessions/stream/x"}
                       for r in self.store.records(self.fed)]
            self.fed = end
            for record in records:
                self.history_records(record)
            assert streams.process_batch(self.deps, records, streams.on_session_record) == {"batchItemFailures": []}
        assert stream_health.set_aside_records(self.deps) == {}

    def history_records(self, record: Any) -> None:
        """History messages are written by the handler itself; nothing to feed for them here."""


def attempt(w: Streamed, write: Any) -> Any:
    """A write through the services: refused (a 4xx/409) or accepted; accepted ones' records all process."""
    try:
        result = write()
    except DomainError:
        result = None
    w.stream()
    return result


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alphabets)
def test_every_documented_limit__every_accepted_write_succeeds_and_every_stream_record_is_processed(
        a: list[str]) -> None:
    assume("".join(a).strip())  # an all-whitespace text is refused as empty (400), not a size question
    w = Streamed()
    sid = w.session(text(a, MAX_CONTENT)).id  # a first prompt at the content limit
    w.stream()
    cid = attempt(w, lambda: w.ask(sid, **max_bundle(a)))
    assert cid is not None, "the largest ask the contract documents is accepted"
    attempt(w, lambda: w.detach(cid))
    answers = [{"question_id": f"q{q}", "selected_options": [f"o{o}" for o in range(6)],
                "custom_text": text(a, MAX_ANSWER_TEXT)} for q in range(4)]
    attempt(w, lambda: w.send(sid, text(a, MAX_CONTENT), "queued-1"))  # queued behind the open turn
    attempt(w, lambda: w.respond(cid, {"answers": answers}))
    attempt(w, lambda: w.report(sid, "message", content=text(a, MAX_CONTENT)))
    attempt(w, lambda: w.report(sid, "turn_completed"))
    second = attempt(w, lambda: w.ask(sid, **max_bundle(a)))
    attempt(w, lambda: w.report(sid, "turn_completed"))
    attempt(w, lambda: w.send(sid, text(a, MAX_CONTENT), "newer-1"))  # supersedes the second question
    if second is not None:
        attempt(w, lambda: w.message(sid, {"client_message_id": "late-1", "content": text(a, MAX_CONTENT),
                                           "in_reply_to": {"clarification_id": second, "answers": answers}}))
        found = archive.find(w.deps, w.get(sid), second)
        assert found is not None
        assert entry_bytes(clarification_view(found[0], found[1], now=w.deps.now())) <= MAX_ENTRY_BYTES
    attempt(w, lambda: w.cancel(sid))
    w.stream()


def test_max_entry_bytes__the_largest_entry_any_input_can_make__within_the_bound() -> None:
    """The transcript's 1 MiB bound rests on MAX_ENTRY_BYTES: a bundle at every limit, answered at every limit,
    in the character JSON escapes most (6 bytes for one code point)."""
    w = Streamed()
    worst = ["\x01"]
    sid = w.session("start").id
    cid = w.ask(sid, **max_bundle(worst))
    w.detach(cid)
    w.respond(cid, {"answers": [{"question_id": f"q{q}", "selected_options": [f"o{o}" for o in range(6)],
                                 "custom_text": text(worst, MAX_ANSWER_TEXT)} for q in range(4)]})
    found = archive.find(w.deps, w.get(sid), cid)
    assert found is not None
    size = entry_bytes(clarification_view(found[0], found[1], now=w.deps.now()))
    assert 250_000 < size <= MAX_ENTRY_BYTES
