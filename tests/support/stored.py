"""Reads of the live store shared by the HTTP test flows (the real DynamoStore behind the running stack)."""
from __future__ import annotations

from chalicelib import bootstrap
from chalicelib.domain.clarify import session_of
from chalicelib.domain.model import Session
from chalicelib.store.dynamo import DynamoStore


class StoredState:
    @property
    def store(self) -> DynamoStore:
        store = bootstrap.deps().store
        assert isinstance(store, DynamoStore)
        return store

    def stored(self, session_id: str) -> Session:
        session = self.store.get_session(session_id)
        assert session is not None
        return session

    def rows(self, cid: str) -> dict[str, tuple[str, bool]]:
        """(status, agent_disconnected) of each row of a bundle as stored: in the aggregate, or in its history
        record once it can no longer be answered (the stream function moves it there)."""
        sid = session_of(cid)
        assert sid is not None
        bundle = self.stored(sid).bundle(cid) or self.store.get_archived(sid, cid)
        assert bundle is not None
        return {r.question.question_id: (r.status, r.agent_disconnected) for r in bundle.rows}
