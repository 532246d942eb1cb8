"""The before-traffic reconciler as a process (what the deploy gate invokes): repairs every item with
outstanding work, then sets the traffic flag for CLARIFY_DEPLOYMENT_ID. Prints its report as JSON;
exits non-zero (the error on stderr) when it failed, and traffic stays off."""
from __future__ import annotations

import json
import sys


def main() -> int:
    from chalicelib import observability

    observability.configure(stream=sys.stderr)  # stdout carries the report
    import app
    try:
        report = app.reconcile_before_traffic({}, None)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
