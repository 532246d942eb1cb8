"""Maps stored items (plain Python values) to domain objects and back. No logic beyond shape."""
from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..domain.model import (
    Bundle,
    DeferredReady,
    Delivery,
    Dispatch,
    Event,
    Message,
    Option,
    Prompt,
    Quarantine,
    Question,
    Reservation,
    Row,
    Session,
    StartEvent,
    State,
    StatusSummary,
    Task,
    Turn,
    TurnRecord,
    Watchdog,
)
from ..domain.rules import flag
from .attrs import from_attr


def from_attrs(item: Mapping[str, Any]) -> dict[str, Any]:
    """A low-level item (`{"S": ...}` shapes, as in streams and boto3 clients) to plain values."""
    return {k: from_attr(v) for k, v in item.items()}


def turn_to_item(turn: Turn) -> dict[str, Any]:
    item: dict[str, Any] = {"id": turn.id, "seq": turn.seq, "started_at": turn.started_at}
    if turn.completed_at:
        item["completed_at"] = turn.completed_at
    return item


def turn_from_item(item: Mapping[str, Any] | None) -> Turn | None:
    if not item or not item.get("id"):
        return None
    return Turn(id=item["id"], seq=int(item.get("seq", 0)), started_at=item.get("started_at", ""),
                completed_at=item.get("completed_at") or None)


def prompt_to_item(p: Prompt) -> dict[str, Any]:
    item: dict[str, Any] = {
        "message_id": p.message_id, "client_message_id": p.client_message_id, "turn_id": p.turn_id,
        "content": p.content, "author_id": p.author_id, "created_at": p.created_at,
        "generation": p.generation, "dispatch": p.dispatch.value,
    }
    if p.deadline:
        item["deadline"] = p.deadline
    if p.reply_to is not None:
        item["reply_to"] = dict(p.reply_to)
    if p.hidden:
        item["hidden"] = True
    return item


def prompt_from_item(item: Mapping[str, Any] | None) -> Prompt | None:
    if not item or not item.get("message_id"):
        return None
    return Prompt(
        message_id=item["message_id"], client_message_id=item.get("client_message_id", ""),
        turn_id=item.get("turn_id", ""), content=item.get("content", ""),
        author_id=item.get("author_id", ""), created_at=item.get("created_at", ""),
        generation=int(item.get("generation", 0)), dispatch=Dispatch(item.get("dispatch", "pending")),
        deadline=item.get("deadline") or None, reply_to=item.get("reply_to") or None,
        hidden=flag(item.get("hidden", False)),
    )


def question_to_item(q: Question) -> dict[str, Any]:
    return {"question_id": q.question_id, "title": q.title, "prompt": q.prompt,
            "options": [{"option_id": o.option_id, "label": o.label, "description": o.description}
                        for o in q.options]}


def question_from_item(item: Mapping[str, Any]) -> Question:
    return Question(
        question_id=item.get("question_id", ""), title=item.get("title", ""), prompt=item.get("prompt", ""),
        options=tuple(Option(o.get("option_id", ""), o.get("label", ""), o.get("description", ""))
                      for o in item.get("options", [])),
    )


def row_to_item(r: Row) -> dict[str, Any]:
    item: dict[str, Any] = {"question": question_to_item(r.question), "status": r.status,
                            "agent_disconnected": r.agent_disconnected}
    if r.response is not None:
        item["response"] = dict(r.response)
    return item


def bundle_to_item(b: Bundle) -> dict[str, Any]:
    item: dict[str, Any] = {
        "turn_id": b.turn_id, "created_at": b.created_at, "context": b.context,
        "order": [r.question.question_id for r in b.rows],
        "rows": {r.question.question_id: row_to_item(r) for r in b.rows},
        "dismissed_by": {sub: True for sub in b.dismissed_by},
    }
    if b.delivery is not None:
        item["delivery"] = delivery_to_item(b.delivery)
    if b.waiter_until:
        item["waiter_until"] = b.waiter_until
    if b.late_message_id:
        item["late_message_id"] = b.late_message_id
    # DynamoDB bills every byte of the item, names included, on each write of the aggregate: the transcript
    # message id is kept only when it is not the bundle's own id (it always is, for a bundle asked today), and
    # the turn's number is named as a turn's own is ("seq").
    if b.message_id != b.id:
        item["message_id"] = b.message_id
    if b.turn_seq:
        item["seq"] = b.turn_seq
    return item


def delivery_to_item(d: Delivery) -> dict[str, Any]:
    item: dict[str, Any] = {
        "delivery_id": d.delivery_id, "row_ids": list(d.row_ids), "outcome": d.outcome, "mode": d.mode,
        "claimed_at": d.claimed_at, "deadline": d.deadline, "idempotency_key": d.idempotency_key,
        "fingerprint": d.fingerprint,
    }
    if d.confirmed_at:
        item["confirmed_at"] = d.confirmed_at
    if d.result:
        item["result"] = d.result
    return item


def delivery_from_item(item: Mapping[str, Any] | None) -> Delivery | None:
    if not item or not item.get("delivery_id"):
        return None
    return Delivery(delivery_id=item["delivery_id"], row_ids=tuple(item.get("row_ids", [])),
                    outcome=item.get("outcome", ""), mode=item.get("mode", "live"),
                    claimed_at=item.get("claimed_at", ""), deadline=item.get("deadline", ""),
                    idempotency_key=item.get("idempotency_key", ""), fingerprint=item.get("fingerprint", ""),
                    confirmed_at=item.get("confirmed_at") or None, result=item.get("result") or None)


def reservation_to_item(r: Reservation) -> dict[str, Any]:
    return {"turn_id": r.turn_id, "seq": r.seq, "predecessor": turn_to_item(r.predecessor),
            "bundle_id": r.bundle_id, "bundle_turn_id": r.bundle_turn_id, "row_ids": list(r.row_ids),
            "generation": r.generation, "created_at": r.created_at, "deadline": r.deadline,
            "attempted": r.attempted}


def reservation_from_item(item: Mapping[str, Any] | None) -> Reservation | None:
    if not item or not item.get("turn_id"):
        return None
    predecessor = turn_from_item(item.get("predecessor"))
    if predecessor is None:
        raise ValueError("reservation without a predecessor turn")
    return Reservation(turn_id=item["turn_id"], seq=int(item.get("seq", 0)), predecessor=predecessor,
                       bundle_id=item.get("bundle_id", ""), bundle_turn_id=item.get("bundle_turn_id", ""),
                       row_ids=tuple(item.get("row_ids", [])), generation=int(item.get("generation", 0)),
                       created_at=item.get("created_at", ""), deadline=item.get("deadline", ""),
                       attempted=flag(item.get("attempted", False)))


def start_event_to_item(m: StartEvent) -> dict[str, Any]:
    return {"turn_id": m.turn_id, "seq": m.seq, "started_at": m.started_at}


def start_event_from_item(item: Mapping[str, Any] | None) -> StartEvent | None:
    if not item or not item.get("turn_id"):
        return None
    return StartEvent(turn_id=item["turn_id"], seq=int(item.get("seq", 0)), started_at=item.get("started_at", ""))


def deferred_ready_to_item(d: DeferredReady) -> dict[str, Any]:
    return {"generation": d.generation, "turn_id": d.turn_id, "at": d.at}


def deferred_ready_from_item(item: Mapping[str, Any] | None) -> DeferredReady | None:
    if not item or not item.get("turn_id"):
        return None
    return DeferredReady(generation=int(item.get("generation", 0)), turn_id=item["turn_id"], at=item.get("at", ""))


def watchdog_to_item(w: Watchdog) -> dict[str, Any]:
    return {"clarification_id": w.clarification_id, "turn_id": w.turn_id, "execution_id": w.execution_id,
            "prompt_generation": w.prompt_generation, "due": w.due, "text": w.text}


def watchdog_from_item(item: Mapping[str, Any] | None) -> Watchdog | None:
    if not item or not item.get("clarification_id"):
        return None
    return Watchdog(clarification_id=item["clarification_id"], turn_id=item.get("turn_id", ""),
                    execution_id=item.get("execution_id", ""), prompt_generation=int(item.get("prompt_generation", 0)),
                    due=item.get("due", ""), text=item.get("text", ""))


def bundle_from_item(bundle_id: str, item: Mapping[str, Any]) -> Bundle:
    rows_item = item.get("rows", {}) or {}
    order = item.get("order") or sorted(rows_item)
    rows = tuple(
        Row(question=question_from_item(rows_item[qid].get("question", {"question_id": qid})),
            status=rows_item[qid].get("status", ""),
            agent_disconnected=flag(rows_item[qid].get("agent_disconnected", False)),
            response=rows_item[qid].get("response"))
        for qid in order if qid in rows_item
    )
    dismissed = item.get("dismissed_by") or {}
    return Bundle(id=bundle_id, turn_id=item.get("turn_id", ""), message_id=item.get("message_id") or bundle_id,
                  created_at=item.get("created_at", ""), context=item.get("context", ""), rows=rows,
                  delivery=delivery_from_item(item.get("delivery")), waiter_until=item.get("waiter_until") or None,
                  dismissed_by=tuple(sorted(k for k, v in dismissed.items() if flag(v))),
                  late_message_id=item.get("late_message_id") or None, turn_seq=int(item.get("seq") or 0))


def session_from_item(item: Mapping[str, Any]) -> Session:
    """A quarantined aggregate that cannot be decoded reads as its identity and the quarantine alone."""
    try:
        return _session_from_item(item)
    except (KeyError, TypeError, ValueError, AttributeError):
        q = quarantine_from_item(item.get("quarantine"))
        if q is None:
            raise
        return Session(id=item["session_id"], workspace_id=str(item.get("workspace_id", "")),
                       task_id=str(item.get("task_id", "")), created_at=str(item.get("created_at", "")),
                       is_primary=False, state=State.FAILED, version=0, quarantine=q)


def quarantine_from_item(item: Any) -> Quarantine | None:
    if not isinstance(item, Mapping) or not item.get("reason"):
        return None
    return Quarantine(reason=str(item["reason"]), at=str(item.get("at", "")))


def _session_from_item(item: Mapping[str, Any]) -> Session:
    bundles = item.get("bundles") or {}
    return Session(
        id=item["session_id"], workspace_id=item["workspace_id"], task_id=item["task_id"],
        created_at=item["created_at"], updated_at=item.get("updated_at", ""),
        is_primary=flag(item.get("is_primary", False)), state=State(item["state"]),
        version=int(item.get("version", 0)), turn_seq=int(item.get("turn_seq", 0)),
        current_turn=turn_from_item(item.get("current_turn")),
        generation=int(item.get("generation", 0)), execution_id=item.get("execution_id", ""),
        prompt=prompt_from_item(item.get("prompt")),
        bundles=tuple(sorted((bundle_from_item(bid, b) for bid, b in bundles.items()),
                             key=lambda b: (b.created_at, b.id))),
        reservation=reservation_from_item(item.get("reservation")),
        start_event=start_event_from_item(item.get("start_event")),
        watchdog=watchdog_from_item(item.get("watchdog")),
        deferred_ready=deferred_ready_from_item(item.get("deferred_ready")),
        recon_due=item.get("recon_due") or None,
        queue=tuple(p for p in (prompt_from_item(q) for q in item.get("queue") or []) if p is not None),
        quarantine=quarantine_from_item(item.get("quarantine")),
        archived=int(item.get("archived", 0)),
    )


def session_to_item(s: Session) -> dict[str, Any]:
    item: dict[str, Any] = {
        "session_id": s.id, "workspace_id": s.workspace_id, "task_id": s.task_id,
        "created_at": s.created_at, "updated_at": s.updated_at or s.created_at,
        "is_primary": s.is_primary, "state": s.state.value, "version": s.version,
        "turn_seq": s.turn_seq, "generation": s.generation, "execution_id": s.execution_id,
        "bundles": {b.id: bundle_to_item(b) for b in s.bundles},
    }
    if s.current_turn:
        item["current_turn"] = turn_to_item(s.current_turn)
    if s.prompt:
        item["prompt"] = prompt_to_item(s.prompt)
    if s.reservation:
        item["reservation"] = reservation_to_item(s.reservation)
    if s.start_event:
        item["start_event"] = start_event_to_item(s.start_event)
    if s.watchdog:
        item["watchdog"] = watchdog_to_item(s.watchdog)
    if s.deferred_ready:
        item["deferred_ready"] = deferred_ready_to_item(s.deferred_ready)
    item["queue"] = [prompt_to_item(p) for p in s.queue]
    if s.quarantine:
        item["quarantine"] = {"reason": s.quarantine.reason, "at": s.quarantine.at}
    if s.archived:
        item["archived"] = s.archived
    return item


def task_to_item(t: Task) -> dict[str, Any]:
    item: dict[str, Any] = {"task_id": t.id, "workspace_id": t.workspace_id, "created_at": t.created_at,
                            "title": t.title, "workflow_step": t.workflow_step,
                            "summary_revision": t.summary.revision,
                            "list_key": task_list_key(t.summary.pending_action, t.last_activity_at)}
    for name, value in (("pending_action", t.summary.pending_action),
                        ("primary_session_id", t.summary.primary_session_id), ("summary_at", t.summary.updated_at),
                        ("activity_at", t.summary.activity_at)):
        if value:
            item[name] = value
    if t.session_ids is not None:
        item["sessions"] = {sid: True for sid in t.session_ids}
    return item


def task_from_item(item: Mapping[str, Any]) -> Task:
    sessions = item.get("sessions")
    return Task(id=item["task_id"], workspace_id=item["workspace_id"], title=item["title"],
                workflow_step=item["workflow_step"], created_at=item["created_at"],
                summary=StatusSummary(pending_action=item.get("pending_action") or None,
                                      revision=int(item.get("summary_revision") or 0),
                                      primary_session_id=item.get("primary_session_id") or None,
                                      updated_at=item.get("summary_at") or "",
                                      activity_at=item.get("activity_at") or ""),
                session_ids=tuple(sorted(sessions)) if isinstance(sessions, Mapping) else None)


def task_list_key(pending_action: str | None, last_activity_at: str) -> str:
    """The task list's order, as the sort key of the workspace's index read newest first: tasks with a
    pending question ("1") before the others ("0"), each by their latest activity."""
    return f"{1 if pending_action else 0}#{last_activity_at}"


def history_sk_turn(seq: int) -> str:
    return f"T#{seq:010d}#0"


HISTORY_TURNS_FROM, HISTORY_TURNS_TO = "T#", "T#~"  # every turn record and message of a session lies between


def history_sk_message(turn_seq: int, created_at: str, message_id: str) -> str:
    # Messages sort after their turn record and by time within the turn.
    return f"T#{turn_seq:010d}#M#{created_at}#{message_id}"


def is_message_key(sk: str) -> bool:
    """Whether `sk` has the shape of a message's history key (a transcript cursor names one)."""
    return len(sk) > 15 and sk.startswith("T#") and sk[2:12].isdigit() and sk[12:15] == "#M#"


def history_sk_archive(bundle_id: str) -> str:
    # Before every turn's entries ("A" < "T"); a Query for the archive alone reads this prefix.
    return f"A#{bundle_id}"


def archive_to_item(session: Session, bundle: Bundle) -> dict[str, Any]:
    """A closed bundle's history record: the bundle exactly as it left the aggregate."""
    return {"session_id": session.id, "sk": history_sk_archive(bundle.id), "kind": "archive", "item_id": bundle.id,
            "workspace_id": session.workspace_id, "task_id": session.task_id, "turn_id": bundle.turn_id,
            "turn_seq": 0, "created_at": bundle.created_at, "bundle": bundle_to_item(bundle)}


def stored_json(value: Any) -> str:
    """A JSON attribute as stored: UTF-8 as is (escaped, a non-ASCII character would count 6 or 12 bytes)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def message_to_item(message: Message) -> dict[str, Any]:
    """A transcript message's history record, exactly as stored (its size is what DynamoDB counts)."""
    item: dict[str, Any] = {
        "session_id": message.session_id, "sk": history_sk_message(message.turn_seq, message.created_at, message.id),
        "kind": "message", "item_id": message.id, "workspace_id": message.workspace_id, "task_id": message.task_id,
        "turn_id": message.turn_id, "turn_seq": message.turn_seq, "created_at": message.created_at,
        "author_type": message.author_type, "type": message.type, "content": message.content}
    if message.clarification_id:
        item["clarification_id"] = message.clarification_id
    if message.meta:
        item["meta"] = stored_json(dict(message.meta))
    return item


def event_to_item(event: Event, written_at: str, expires_at: int) -> dict[str, Any]:
    """A feed event's record, exactly as stored."""
    item: dict[str, Any] = {
        "workspace_id": event.workspace_id, "sk": f"{event.at}#{event.id}", "event_id": event.id,
        "type": event.type, "task_id": event.task_id, "payload": stored_json(dict(event.payload)), "at": event.at,
        "written_at": written_at, "expires_at": expires_at}
    if event.session_id:
        item["session_id"] = event.session_id
    return item


def event_from_item(item: Mapping[str, Any]) -> Event:
    payload = item["payload"]  # JSON, as stored
    return Event(id=item["event_id"], workspace_id=item["workspace_id"], type=item["type"], task_id=item["task_id"],
                 session_id=item.get("session_id"), at=item["at"],
                 payload=json.loads(payload) if isinstance(payload, str) else payload)


def archive_from_item(item: Mapping[str, Any]) -> Bundle:
    return bundle_from_item(item["item_id"], item["bundle"])


def message_from_history(item: Mapping[str, Any]) -> Message:
    meta = item.get("meta")
    if isinstance(meta, str):  # stream images carry the JSON attribute as its stored string
        meta = json.loads(meta) if meta else None
    return Message(
        id=item["item_id"], session_id=item["session_id"], workspace_id=item.get("workspace_id", ""),
        task_id=item["task_id"],
        turn_id=item["turn_id"], turn_seq=int(item.get("turn_seq", 0)),
        author_type=item.get("author_type") or "agent", type=item.get("type") or "message",
        content=item.get("content") or "", created_at=item["created_at"],
        clarification_id=item.get("clarification_id") or None, meta=meta or None,
    )


def turn_record_from_history(item: Mapping[str, Any]) -> TurnRecord:
    return TurnRecord(id=item["turn_id"], session_id=item["session_id"], seq=int(item.get("turn_seq", 0)),
                      started_at=item["created_at"], completed_at=item.get("completed_at") or None)
