"""Result values shared by the response paths."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Responded:
    clarification_id: str
    status: str  # answered | rejected
    delivery: str  # live | resumed | recorded

    def as_dict(self) -> dict[str, str]:
        return {"clarification_id": self.clarification_id, "status": self.status, "delivery": self.delivery}
