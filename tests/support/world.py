"""One in-process installation for service-level tests: the services over a MemoryStore, a scripted agentctl,
a step clock, an injected sleep and counter ids. Bodies are plain dicts, parsed by the same command parsers
the API uses, so a test reads like the request it stands for."""
from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from chalicelib.auth.tokens import Caller
from chalicelib.domain import clarify, commands
from chalicelib.domain.errors import StoreUnavailable
from chalicelib.domain.model import Bundle, Row, Session, Task
from chalicelib.domain.public import transcript_view
from chalicelib.services import clarifications, frames, history, messages, responses, sessions, tasks
from chalicelib.services.deps import Deps, Settings
from chalicelib.store import codec
from chalicelib.store.memory import MemoryStore
from tests.support.crash import WRITE_METHODS
from tests.support.fakes import CounterIds, FakeAgentctl, Sleeper, StepClock, agent_token

WS = "ws-1"
USER = Caller(sub="user-1", role="user", workspace_id=WS)
OTHER_DEVICE_USER = Caller(sub="user-2", role="user", workspace_id=WS)
QUESTIONS: list[dict[str, Any]] = [
    {"question_id": "q1", "title": "Database", "prompt": "Which database?",
     "options": [{"option_id": "pg", "label": "Postgres"}, {"option_id": "my", "label": "MySQL"}]},
    {"question_id": "q2", "title": "Cache", "prompt": "Which cache?",
     "options": [{"option_id": "redis", "label": "Redis"}, {"option_id": "none", "label": "No cache"}]},
]
ANSWER: dict[str, Any] = {"answers": [{"question_id": "q1", "selected_options": ["pg"]},
                                      {"question_id": "q2", "selected_options": ["redis"], "custom_text": "v7"}]}
SKIP: dict[str, Any] = {"rejected": True, "reject_reason": "not now"}


def agent_of(session_id: str, workspace: str = WS) -> Caller:
    return Caller(sub=f"agent:{session_id}", role="agent", workspace_id=workspace, session_id=session_id)


def sid_of(clarification_id: str) -> str:
    session_id = clarify.session_of(clarification_id)
    assert session_id is not None
    return session_id


class StoreFault(Exception):
    pass


class HookedStore(MemoryStore):
    """A MemoryStore whose named writes can first run a hook (a concurrent writer) or fail."""

    def __init__(self) -> None:
        super().__init__()
        self.before: dict[str, Callable[[], None]] = {}
        self.fail: set[str] = set()

    def __getattribute__(self, name: str) -> Any:
        attr = super().__getattribute__(name)
        if name.startswith("_") or not callable(attr) or name not in WRITE_METHODS:
            return attr

        def hooked(*args: Any, **kwargs: Any) -> Any:
            hook = self.before.pop(name, None)
            if hook is not None:
                hook()
            if name in self.fail:
                raise StoreUnavailable(f"{name} failed")
            return attr(*args, **kwargs)
        return hooked


class World:
    """Services as users and agents call them. `store` may be wrapped (a tap, a crashing proxy)."""

    def __init__(self, store: Any | None = None, *, settings: Settings | None = None, step_ms: int = 0) -> None:
        self.store: Any = store if store is not None else MemoryStore()
        memory = self.store
        while not isinstance(memory, MemoryStore):  # unwrap taps and proxies
            memory = memory.inner
        self.memory: MemoryStore = memory
        self.clock = StepClock(step=timedelta(milliseconds=step_ms))
        self.sleeper = Sleeper(self.clock)
        self.agent = FakeAgentctl(store=self.memory)
        self.deps = Deps(store=self.store, agentctl=self.agent, clock=self.clock, new_id=CounterIds(),
                         agent_token=agent_token,
                         settings=settings or Settings(deployment_id=f"unit-{uuid.uuid4().hex}"),
                         sleep=self.sleeper)
        self.received: list[dict[str, Any]] = []  # what live waiters took from their long-poll

    # ------------------------------------------------------------------ common situations
    def waiting(self) -> tuple[str, str]:
        """(session, bundle): two questions pending and live in the agent's open first turn."""
        s = self.session("start")
        return s.id, self.ask(s.id)

    def detached(self) -> tuple[str, str]:
        sid, cid = self.waiting()
        self.detach(cid)
        return sid, cid

    def agent_confirms(self, cid: str) -> Callable[[], None]:
        """The live waiter's whole job: take the claim from its long-poll, confirm it durably."""
        def run() -> None:
            status, body = self.wait(cid)
            assert status == 200 and body["delivery_id"], body
            self.received.append(body)
            self.confirm(cid, body["delivery_id"])
        return run

    # ------------------------------------------------------------------ users
    def task(self, title: str = "Refactor", caller: Caller = USER) -> str:
        return tasks.create_task(self.deps, caller, commands.create_task({"title": title})).id

    def session(self, prompt: str | None = None, *, task_id: str | None = None, caller: Caller = USER,
                **body: Any) -> Session:
        if prompt:
            body["prompt"] = prompt
        return sessions.create_session(self.deps, caller, task_id or self.task(caller=caller),
                                       commands.create_session(body)).session

    def send(self, session_id: str, content: str = "hello", cmid: str = "m1", caller: Caller = USER,
             **body: Any) -> messages.Admission:
        return self.message(session_id, {"client_message_id": cmid, "content": content, **body}, caller)

    def message(self, session_id: str, body: Any, caller: Caller = USER, deps: Deps | None = None
                ) -> messages.Admission:
        return messages.send_message(deps or self.deps, caller, session_id, commands.send_message(body))

    def respond(self, cid: str, body: Any, key: str | None = None, caller: Caller = USER,
                deps: Deps | None = None) -> responses.Responded:
        return responses.respond(deps or self.deps, caller, cid, commands.respond(body),
                                 commands.idempotency_key(key))

    def dismiss(self, cid: str, caller: Caller = USER) -> dict[str, Any]:
        return responses.dismiss(self.deps, caller, cid)

    def cancel(self, session_id: str, caller: Caller = USER) -> Session:
        return sessions.cancel_session(self.deps, caller, session_id)

    def transcript(self, session_id: str, caller: Caller = USER) -> dict[str, Any]:
        result = history.transcript(self.deps, caller, session_id)
        return transcript_view(result.session, result.messages, now=self.deps.now(),
                               viewer_key=clarify.dismissal_key(caller.sub))

    def contents(self, session_id: str) -> list[tuple[str, str]]:
        return [(m.author_type, m.content) for m in history.transcript(self.deps, USER, session_id).messages]

    # ------------------------------------------------------------------ agents
    def ask(self, session_id: str, questions: list[dict[str, Any]] | None = None, deps: Deps | None = None,
            **body: Any) -> str:
        return clarifications.ask(deps or self.deps, agent_of(session_id), session_id,
                                  commands.ask({"questions": questions or QUESTIONS, **body})).id

    def detach(self, cid: str) -> list[str]:
        return clarifications.detach(self.deps, agent_of(sid_of(cid)), cid)

    def wait(self, cid: str, timeout: int = 0, deps: Deps | None = None) -> tuple[int, dict[str, Any]]:
        return responses.wait(deps or self.deps, agent_of(sid_of(cid)), cid, timeout)

    def confirm(self, cid: str, delivery_id: str, deps: Deps | None = None) -> dict[str, Any]:
        return responses.confirm(deps or self.deps, agent_of(sid_of(cid)), cid,
                                 commands.confirm({"delivery_id": delivery_id}))

    def frame(self, session_id: str, kind: str, **extra: Any) -> dict[str, Any]:
        """A frame carrying the session's current identity (execution, generation, turn), as the agent sends."""
        s = self.get(session_id)
        turn = s.current_turn
        return {"type": kind, "execution_id": s.execution_id, "prompt_generation": s.generation,
                "turn_id": turn.id if turn else None, **extra}

    def frames(self, session_id: str, *items: dict[str, Any], deps: Deps | None = None) -> frames.FrameResult:
        return frames.apply_frames(deps or self.deps, agent_of(session_id), session_id,
                                   commands.frames({"frames": list(items)}))

    def report(self, session_id: str, kind: str, **extra: Any) -> frames.FrameResult:
        return self.frames(session_id, self.frame(session_id, kind, **extra))

    # ------------------------------------------------------------------ reading and arranging state
    def get(self, session_id: str) -> Session:
        found = self.memory.get_session(session_id)
        assert found is not None
        return found

    def bundle(self, cid: str) -> Bundle:
        found = self.get(sid_of(cid)).bundle(cid)
        assert found is not None
        return found

    def rows(self, cid: str) -> dict[str, tuple[str, bool, Any]]:
        return {r.question.question_id: (r.status, r.agent_disconnected, r.response) for r in self.bundle(cid).rows}

    def put(self, session: Session) -> Session:
        """Store an aggregate as another writer left it (and its task, when missing)."""
        self.memory.put_raw_session(codec.session_to_item(session))
        if self.memory.get_task(session.task_id) is None:
            self.memory.put_task(Task(id=session.task_id, workspace_id=session.workspace_id, title="t",
                                      workflow_step="todo", created_at="2025-01-01T10:00:00.000000Z"))
        return session

    def set_row(self, cid: str, question_id: str, **changes: Any) -> None:
        """Rewrite one row as an earlier (per-row) writer left it."""
        s = self.get(sid_of(cid))

        def edit(r: Row) -> Row:
            return replace(r, **changes) if r.question.question_id == question_id else r
        bundles = tuple(replace(b, rows=tuple(edit(r) for r in b.rows)) if b.id == cid else b for b in s.bundles)
        self.memory.put_raw_session(codec.session_to_item(replace(s, bundles=bundles)))
