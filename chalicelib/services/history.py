"""Transcript and turn history: durable history merged with the aggregate, never staler than it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..auth.tokens import Caller
from ..domain.errors import ConditionFailed, Contended, NotFound, ValidationError
from ..domain.model import Bundle, Dispatch, Message, Prompt, Session, TurnRecord
from ..domain.public import clarification_view, entry_bytes, message_view
from ..domain.rules import active_bundles, published_turn
from ..store import codec
from . import archive, paging
from .access import session_for_user
from .deps import Deps

# Every transcript response stays under 1 MiB whatever is stored: at most PENDING_SHOWN active questions,
# then the page, newest first, while the total fits RESPONSE_BYTES, and always one entry at least (so paging
# moves on). An entry's JSON is at most public.MAX_ENTRY_BYTES (a bundle at every documented limit, written
# in characters JSON escapes to 6 bytes), so the worst case is 3 such entries: under 1 MiB.
RESPONSE_BYTES = 1_000_000
PENDING_SHOWN = 2


@dataclass(frozen=True)
class Transcript:
    session: Session  # holding the page's archived bundles too
    messages: list[Message]  # the page, in order
    older_cursor: str | None = None  # where the next (older) page starts; None: this page holds the first
    pending: tuple[Bundle, ...] = ()  # the session's active questions, always shown, even older than the page


def transcript(deps: Deps, caller: Caller, session_id: str, *, limit: int = paging.TRANSCRIPT_PAGE[0],
               before: str | None = None) -> Transcript:
    """One page of the transcript, the newest first: up to `limit` messages older than the cursor `before`
    (none: the newest), in order, bounded in bytes; plus the session's active questions wherever they are."""
    session = session_for_user(deps, caller, session_id, reading=True)
    position = paging.decode(before, "before", 1)
    if position is not None and not codec.is_message_key(position[0]):
        raise ValidationError("before", "before is not a cursor this list issued")
    page = deps.store.page_messages(session.id, limit, position[0] if position else None)
    messages = [m for _, m in reversed(page.items)]
    anchors = [m.clarification_id for m in messages if m.clarification_id and session.bundle(m.clarification_id)
               is None]
    if anchors and session.archived:  # the page's closed questions, from their history records
        session = archive.holding(session, deps.store.get_archived_many(session.id, anchors))
    if position is None:  # the newest page also shows what the aggregate holds and history not yet
        floor = _key(messages[0]) if messages and page.after else None
        messages = [m for m in _with_bundles(session, _with_prompt(session, messages))
                    if floor is None or _key(m) >= floor] + _queued(session)
    else:
        live = {b.id for b in session.bundles}  # an anchor whose question was deleted goes with it
        messages = [m for m in messages if m.type != "clarification" or m.clarification_id in live]
    pending = tuple(active_bundles(session)[-PENDING_SHOWN:])
    now = deps.now()
    kept: list[Message] = []
    used = sum(entry_bytes(clarification_view(session, b, now=now)) for b in pending)
    for m in reversed(messages):  # newest first, while the response stays within its bound
        size = entry_bytes(_entry(session, m, now))
        if kept and used + size > RESPONSE_BYTES:
            break
        kept.append(m)
        used += size
    kept.reverse()
    trimmed = len(kept) < len(messages)
    older = (codec.history_sk_message(kept[0].turn_seq, kept[0].created_at, kept[0].id)
             if kept and (trimmed or page.after) else None)
    return Transcript(session, kept, paging.encode((older,) if older else None), pending)


def _key(m: Message) -> tuple[int, str, str]:
    return (m.turn_seq, m.created_at, m.id)


def _entry(session: Session, m: Message, now: str) -> dict[str, Any]:
    bundle = session.bundle(m.clarification_id) if m.clarification_id else None
    return clarification_view(session, bundle, now=now) if bundle is not None else message_view(m)


def _with_prompt(session: Session, messages: list[Message]) -> list[Message]:
    """The user's latest message is in the transcript as soon as it was admitted (read-your-writes), before
    the stream function copied it into history."""
    p = session.prompt
    if p is None or p.hidden or p.author_id.startswith("system:"):
        return messages
    note = delivery_note(p, ended=session.terminal)
    if any(m.id == p.message_id for m in messages):  # stored when admitted; how its dispatch ended is newer
        return [replace(m, meta={**(m.meta or {}), **note}) if m.id == p.message_id and note else m
                for m in messages]
    return [*messages, prompt_message(session, _prompt_seq(session))]


def _prompt_seq(session: Session) -> int:
    p, turn = session.prompt, session.current_turn
    assert p is not None
    return turn.seq if turn is not None and turn.id == p.turn_id else session.turn_seq


def _queued(session: Session) -> list[Message]:
    """Messages waiting for the agent's turn to end, after everything else, marked as queued; once the
    session ended they never will be sent, and say so (the user can send them elsewhere)."""
    state = {"not_sent": "session_ended"} if session.terminal else {"queued": True}
    return [Message(id=p.message_id, session_id=session.id, workspace_id=session.workspace_id,
                    task_id=session.task_id, turn_id="", turn_seq=session.turn_seq + 1, author_type="user",
                    type="message", content=p.content, created_at=p.created_at,
                    meta={**state, **({"in_reply_to": dict(p.reply_to)} if p.reply_to else {})})
            for p in session.queue]


def turns(deps: Deps, caller: Caller, session_id: str, *, limit: int = paging.TURNS_PAGE[0],
          before: str | None = None) -> tuple[list[TurnRecord], str | None]:
    """One page of the session's turns, the newest first (in order within it), and the older page's cursor."""
    session = session_for_user(deps, caller, session_id, reading=True)
    position = paging.number(paging.decode(before, "before", 1), "before")
    page = deps.store.page_turns(session.id, limit, position)
    by_id = {r.id: r for r in page.items}
    current = published_turn(session)  # a reserved, unacknowledged successor stays hidden
    if current is not None and position is None:  # the stream may not have copied the newest turn yet
        by_id[current.id] = TurnRecord(id=current.id, session_id=session.id, seq=current.seq,
                                       started_at=current.started_at, completed_at=current.completed_at)
    records = sorted(by_id.values(), key=lambda r: r.seq)
    hidden = session.reservation.turn_id if session.reservation is not None and current is not None and \
        session.reservation.turn_id != current.id else None
    records = [r for r in records if r.id != hidden][-limit:]
    return records, paging.encode((str(records[0].seq),) if records and page.after else None)


def _with_bundles(session: Session, messages: list[Message]) -> list[Message]:
    """History plus the aggregate's bundles the stream has not copied yet (the aggregate is never stale).

    A clarification anchor whose bundle was deleted (neither in the aggregate nor archived) is dropped with it.
    """
    known = {m.clarification_id for m in messages if m.clarification_id}
    live = {b.id for b in session.bundles}
    out = [m for m in messages if m.type != "clarification" or m.clarification_id in live]
    seqs = {r_id: seq for r_id, seq in _turn_seqs(session, messages).items()}
    for bundle in session.bundles:
        if bundle.id not in known:
            seq = bundle.turn_seq or seqs.get(bundle.turn_id, session.turn_seq)
            out.append(bundle_message(session, bundle.id, seq))
    return sorted(out, key=lambda m: (m.turn_seq, m.created_at, m.id))


def _turn_seqs(session: Session, messages: list[Message]) -> dict[str, int]:
    seqs = {m.turn_id: m.turn_seq for m in messages}
    if session.current_turn:
        seqs[session.current_turn.id] = session.current_turn.seq
    return seqs


def anchor_seq(session: Session, bundle: Bundle) -> int:
    """Where the stream function files a bundle's transcript anchor: its turn's sequence number (kept on the
    bundle; a bundle stored before it was kept: its turn's, when that is the current one, else 0)."""
    if bundle.turn_seq:
        return bundle.turn_seq
    turn = session.current_turn
    return turn.seq if turn is not None and turn.id == bundle.turn_id else 0


def bundle_message(session: Session, bundle_id: str, turn_seq: int) -> Message:
    """The transcript anchor of a bundle (the stream function stores the same one)."""
    bundle = session.bundle(bundle_id)
    assert bundle is not None
    first = bundle.rows[0].question.prompt if bundle.rows else ""
    return Message(id=bundle.message_id, session_id=session.id, workspace_id=session.workspace_id,
                   task_id=session.task_id, turn_id=bundle.turn_id, turn_seq=turn_seq, author_type="agent",
                   type="clarification", content=first, created_at=bundle.created_at, clarification_id=bundle.id)


def prompt_message(session: Session, turn_seq: int) -> Message:
    """The transcript message of the session's latest prompt (the stream function stores the same one)."""
    assert session.prompt is not None
    p = session.prompt
    meta = {**({"in_reply_to": dict(p.reply_to)} if p.reply_to else {}), **delivery_note(p, ended=session.terminal)}
    return Message(id=p.message_id, session_id=session.id, workspace_id=session.workspace_id,
                   task_id=session.task_id, turn_id=p.turn_id, turn_seq=turn_seq, author_type="user",
                   type="message", content=p.content, created_at=p.created_at, meta=meta or None)


def delivery_note(p: Prompt, ended: bool = False) -> dict[str, Any]:
    """What the transcript says of a message whose dispatch ended badly: it was refused (never sent: the
    session had ended, or the agent did not accept it), or the connection broke while sending and nobody can
    know whether it arrived (never resent)."""
    if p.dispatch == Dispatch.REJECTED:
        return {"not_sent": "session_ended" if ended else "agent_refused"}
    if p.dispatch == Dispatch.ATTEMPTED and p.deadline is None:
        return {"delivery_unknown": True}
    return {}


def delete_message(deps: Deps, caller: Caller, session_id: str, message_id: str) -> None:
    """Remove one transcript message. A clarification entry removes that bundle only (from the aggregate,
    or its history record once archived); the turn pointer never moves, so deleting a newer turn's messages
    cannot reactivate an older question."""
    session = session_for_user(deps, caller, session_id)
    _, messages = deps.store.list_history(session.id)
    message = next((m for m in _with_prompt(session, messages) if m.id == message_id), None)
    bundle = next((b for b in session.bundles if b.message_id == message_id), None)
    archived = deps.store.get_archived(session.id, message_id) if bundle is None and session.archived else None
    if archived is not None and archived.message_id != message_id:
        archived = None
    if message is None and bundle is None and archived is None:
        raise NotFound("message not found")
    if bundle is not None:
        try:
            deps.store.remove_bundle(session.id, bundle.id, deps.now())
        except ConditionFailed as exc:
            current = exc.session or deps.store.get_session(session.id)
            if current is not None and current.bundle(bundle.id) is not None:
                raise Contended("an answer to this question is being delivered; delete it once that finished") from exc
            archived = bundle  # removed by a concurrent delete, or archived meanwhile: its record goes too
    if archived is not None:
        deps.store.delete_archived(session.id, archived.id)
    if session.prompt is not None and session.prompt.message_id == message_id and not session.prompt.hidden:
        try:
            deps.store.hide_prompt(session.id, message_id, deps.now())
        except ConditionFailed:
            pass  # a newer prompt replaced it: history alone holds it now
    if message is not None:
        deps.store.delete_message(message)
