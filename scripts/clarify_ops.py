"""clarify-ops: what an on-call engineer runs when an alarm fires (README.md, "Operations").

    scripts/clarify-ops [--stage local|prod] [--json] session ID
    scripts/clarify-ops outstanding
    scripts/clarify-ops reconcile [--before-traffic] [--invoke]
    scripts/clarify-ops release ID
    scripts/clarify-ops replay [ID | --all]
    scripts/clarify-ops user add EMAIL --workspace W
    scripts/clarify-ops agent-keys rotate

Against the local emulator by default (the local stage: AWS_ENDPOINT_URL, else 127.0.0.1:4566); `--stage prod`
reads that stage's table prefix from .chalice/config.json and uses the usual AWS credentials. Readable output
by default, `--json` for scripts. It shows ids, states and deadlines, never a token, an answer or a prompt's
text. Exit codes: 0 done (or nothing needs attention), 1 failed, 2 usage, 3 not found, 4 needs attention
(`outstanding`: overdue or quarantined work), 5 nothing to do (`release`: not quarantined).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OK, FAILED, USAGE, NOT_FOUND, ATTENTION, NOTHING_TO_DO = 0, 1, 2, 3, 4, 5
Out = Callable[[str], None]


# ------------------------------------------------------------------ environment
def configure(stage: str) -> None:
    """Point the store at the stage's tables: variables already set win (a test's stack, an operator's
    AWS_ENDPOINT_URL); the local stage fills in the emulator and its development settings."""
    from scripts.local.env import local_env

    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    if stage not in config["stages"]:
        raise SystemExit(f"clarify-ops: no stage {stage!r} in .chalice/config.json")
    env = local_env() if stage == "local" else dict(config["stages"][stage].get("environment_variables", {}))
    if stage != "local":
        env.setdefault("CLARIFY_SERVICE", f"{config['app_name']}-{stage}")
    for key, value in env.items():
        if key == "AWS_ENDPOINT_URL" and os.environ.get("LOCALSTACK_HOST"):
            continue
        os.environ.setdefault(key, value)
    from chalicelib import bootstrap

    bootstrap.configure_tables()


def _deps() -> Any:
    from chalicelib import bootstrap

    return bootstrap.deps()


def _raw_session(session_id: str) -> dict[str, Any] | None:
    """The aggregate's item as stored (the quarantine mark is not part of the domain model)."""
    from chalicelib.store import codec
    from chalicelib.store.models import SessionRecord

    store = _deps().store
    resp = store.client.get_item(TableName=str(SessionRecord.Meta.table_name),
                                 Key={"session_id": {"S": session_id}}, ConsistentRead=True)
    item = resp.get("Item")
    return codec.from_attrs(item) if item else None


# ------------------------------------------------------------------ session
def describe(item: dict[str, Any], now: str) -> dict[str, Any]:
    """The aggregate decoded for a human: states, rows, intents, deadlines and what the rule says."""
    from chalicelib.domain import clarify, rules
    from chalicelib.functions.reconciler import next_due
    from chalicelib.store import codec

    s = codec.session_from_item(item)
    due = next_due(s, now)
    return {
        "session": s.id, "task": s.task_id, "workspace": s.workspace_id, "state": s.state.value,
        "version": s.version, "updated_at": s.updated_at,
        "current_turn": _turn(s.current_turn), "turn_seq": s.turn_seq, "generation": s.generation,
        "execution": s.execution_id,
        "rule": {"pending_action": rules.pending_action(s), "input_capable": rules.input_capable(s.state),
                 "terminal": s.terminal, "active_clarifications": [b.id for b in rules.active_bundles(s)]},
        "bundles": [{
            "clarification": b.id, "turn": b.turn_id, "state": clarify.derived_state(s, b, now),
            "active": rules.bundle_is_active(s, b), "waiter_until": b.waiter_until or None,
            "rows": [{"question": r.question.question_id, "status": rules.row_status(r.status),
                      "detached": bool(r.agent_disconnected), "has_response": r.response is not None}
                     for r in b.rows],
            "delivery": _delivery(b.delivery, now),
        } for b in s.bundles],
        "reservation": None if s.reservation is None else {
            "successor_turn": s.reservation.turn_id, "seq": s.reservation.seq, "attempted": s.reservation.attempted,
            "clarification": s.reservation.bundle_id, "rows": list(s.reservation.row_ids),
            "deadline": s.reservation.deadline, "overdue": s.reservation.deadline < now},
        "prompt": None if s.prompt is None else {
            "message": s.prompt.message_id, "turn": s.prompt.turn_id, "generation": s.prompt.generation,
            "dispatch": s.prompt.dispatch.value, "deadline": s.prompt.deadline, "system": s.prompt.author_id
            .startswith("system:")},
        "watchdog": None if s.watchdog is None else {
            "clarification": s.watchdog.clarification_id, "turn": s.watchdog.turn_id, "due": s.watchdog.due,
            "overdue": s.watchdog.due < now},
        "queue": [{"message": p.message_id, "deadline": p.deadline} for p in s.queue],
        "owner_deadline": {"indexed": item.get("recon_due"), "shard": item.get("recon_shard"),
                           "next_due": due, "overdue": due is not None and due < now},
        "quarantine": item.get("quarantine"),
    }


def _turn(turn: Any) -> dict[str, Any] | None:
    if turn is None:
        return None
    return {"id": turn.id, "seq": turn.seq, "started_at": turn.started_at, "completed_at": turn.completed_at}


def _delivery(d: Any, now: str) -> dict[str, Any] | None:
    if d is None:
        return None
    return {"delivery": d.delivery_id, "mode": d.mode, "outcome": d.outcome, "rows": list(d.row_ids),
            "pending": d.pending, "result": d.result, "deadline": d.deadline,
            "overdue": d.pending and d.deadline < now}


def print_session(view: dict[str, Any], out: Out) -> None:
    turn = view["current_turn"]
    out(f"session {view['session']}  task {view['task']}  workspace {view['workspace']}")
    out(f"  state {view['state']}  version {view['version']}  generation {view['generation']}  "
        f"execution {view['execution'] or '-'}")
    out(f"  current turn {turn['id']} (seq {turn['seq']}, {'completed' if turn['completed_at'] else 'open'})"
        if turn else "  no turn yet")
    rule = view["rule"]
    out(f"  rule: pending_action={rule['pending_action']}  input_capable={rule['input_capable']}  "
        f"active={', '.join(rule['active_clarifications']) or 'none'}")
    if view["quarantine"]:
        q = view["quarantine"]
        out(f"  QUARANTINED since {q.get('at')}: {q.get('reason')}  (after repairing: clarify-ops release "
            f"{view['session']})")
    for b in view["bundles"]:
        out(f"  clarification {b['clarification']}  turn {b['turn']}  {b['state']}"
            f"{'  ACTIVE' if b['active'] else ''}{'  waiter until ' + b['waiter_until'] if b['waiter_until'] else ''}")
        for r in b["rows"]:
            out(f"    {r['question']}: {r['status']}{'  detached' if r['detached'] else ''}"
                f"{'  (has a response)' if r['has_response'] else ''}")
        d = b["delivery"]
        if d:
            state = "PENDING" if d["pending"] else f"done ({d['result']})"
            out(f"    delivery {d['delivery']}  {d['mode']} {d['outcome']}  {state}  deadline {d['deadline']}"
                f"{'  OVERDUE' if d['overdue'] else ''}")
    r = view["reservation"]
    if r:
        out(f"  reservation: successor turn {r['successor_turn']} (seq {r['seq']})  "
            f"{'attempted' if r['attempted'] else 'not attempted'}  for {r['clarification']}  deadline "
            f"{r['deadline']}{'  OVERDUE' if r['overdue'] else ''}")
    p = view["prompt"]
    if p:
        out(f"  prompt {p['message']}  turn {p['turn']}  generation {p['generation']}  {p['dispatch']}"
            f"{'  (system)' if p['system'] else ''}{'  deadline ' + p['deadline'] if p['deadline'] else ''}")
    w = view["watchdog"]
    if w:
        overdue = "  OVERDUE" if w["overdue"] else ""
        out(f"  watchdog for {w['clarification']}  turn {w['turn']}  due {w['due']}{overdue}")
    if view["queue"]:
        out(f"  queue: {len(view['queue'])} message(s): {', '.join(q['message'] for q in view['queue'])}")
    o = view["owner_deadline"]
    out(f"  owner deadline: indexed {o['indexed'] or '-'} ({o['shard'] or 'not in the index'}), next due "
        f"{o['next_due'] or '-'}{'  OVERDUE: the scheduled reconciler acts on its next run' if o['overdue'] else ''}")


def cmd_session(args: argparse.Namespace, out: Out) -> int:
    item = _raw_session(args.id)
    if item is None:
        return _not_found(args, out, f"no session {args.id!r}")
    view = describe(item, _deps().now())
    if args.json:
        out(json.dumps(view, indent=2))
    else:
        print_session(view, out)
    return OK


# ------------------------------------------------------------------ outstanding
def outstanding(now: str) -> dict[str, Any]:
    """The reconciler's index: sessions with outstanding work (overdue = the next run acts), and quarantined
    sessions (the reconciler no longer touches them)."""
    from chalicelib.store.models import SessionRecord
    from chalicelib.store.writes import QUARANTINE_SHARD

    deps = _deps()
    due: list[dict[str, Any]] = []
    for session_id in deps.store.due_sessions(None):
        item = _raw_session(session_id)
        if item is None:
            continue
        view = describe(item, now)
        due.append({"session": session_id, "due": item.get("recon_due"),
                    "overdue": bool(item.get("recon_due")) and str(item.get("recon_due")) < now,
                    "work": _work(view)})
    quarantined = []
    for record in SessionRecord.reconciler_work.query(QUARANTINE_SHARD):
        item = _raw_session(record.session_id) or {}
        mark = item.get("quarantine") or {}
        quarantined.append({"session": record.session_id, "reason": mark.get("reason"), "at": mark.get("at")})
    return {"now": now, "due": due, "quarantined": quarantined}


def _work(view: dict[str, Any]) -> list[str]:
    work = []
    if view["reservation"]:
        work.append("reservation" + (" (attempted)" if view["reservation"]["attempted"] else ""))
    work += [f"delivery intent {b['clarification']}" for b in view["bundles"] if b["delivery"] and
             b["delivery"]["pending"]]
    if view["prompt"] and view["prompt"]["dispatch"] in ("pending", "attempted") and view["prompt"]["deadline"]:
        work.append(f"prompt {view['prompt']['dispatch']}")
    work += [f"waiter lease {b['clarification']}" for b in view["bundles"] if b["active"] and b["waiter_until"]]
    if view["watchdog"]:
        work.append("watchdog")
    if view["queue"]:
        work.append(f"queue ({len(view['queue'])})")
    return work


def cmd_outstanding(args: argparse.Namespace, out: Out) -> int:
    report = outstanding(_deps().now())
    attention = bool(report["quarantined"]) or any(d["overdue"] for d in report["due"])
    if args.json:
        out(json.dumps(report, indent=2))
        return ATTENTION if attention else OK
    out(f"{len(report['due'])} session(s) with outstanding work, "
        f"{sum(d['overdue'] for d in report['due'])} overdue (the scheduled reconciler acts on those); "
        f"{len(report['quarantined'])} quarantined")
    for d in report["due"]:
        out(f"  {d['session']}  due {d['due']}{'  OVERDUE' if d['overdue'] else ''}  {', '.join(d['work']) or '-'}")
    for q in report["quarantined"]:
        out(f"  QUARANTINED {q['session']}  since {q['at']}: {q['reason']}")
    return ATTENTION if attention else OK


# ------------------------------------------------------------------ reconcile
def cmd_reconcile(args: argparse.Namespace, out: Out) -> int:
    if args.invoke:
        return _invoke_reconciler(args, out)
    from chalicelib.functions.reconciler import ReconcileFailed, reconcile

    try:
        report = reconcile(_deps(), before_traffic=args.before_traffic).as_dict()
    except ReconcileFailed as exc:
        out(json.dumps({"failed": str(exc)}) if args.json else f"reconciler failed: {exc}")
        return FAILED
    if args.json:
        out(json.dumps(report))
    else:
        done = {k: v for k, v in report.items() if v and k not in ("examined", "errors")}
        out(f"reconciled: {report['examined']} session(s) examined; "
            + (", ".join(f"{k.replace('_', ' ')} {v}" for k, v in done.items()) or "nothing to repair"))
    return OK


def _invoke_reconciler(args: argparse.Namespace, out: Out) -> int:
    """The deployed function, as the deploy gate invokes it (its agent URL and secrets are the stack's)."""
    from chalicelib import aws

    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    name = (f"{config['app_name']}-{args.stage}-"
            f"{'reconcile_before_traffic' if args.before_traffic else 'reconcile_scheduled'}")
    resp = aws.client("lambda").invoke(FunctionName=name, Payload=b"{}")
    payload = resp["Payload"].read().decode()
    out(payload if args.json else f"{name}: {payload}")
    return FAILED if resp.get("FunctionError") else OK


# ------------------------------------------------------------------ release
def cmd_release(args: argparse.Namespace, out: Out) -> int:
    from chalicelib.domain.errors import ConditionFailed

    deps = _deps()
    if _raw_session(args.id) is None:
        return _not_found(args, out, f"no session {args.id!r}")
    try:
        deps.store.release(args.id, deps.now())
    except ConditionFailed:
        out(json.dumps({"session": args.id, "released": False, "reason": "not quarantined"}) if args.json
            else f"{args.id} is not quarantined: nothing to release")
        return NOTHING_TO_DO
    out(json.dumps({"session": args.id, "released": True}) if args.json else
        f"released {args.id}: the next reconciler run examines it (clarify-ops reconcile runs one now)")
    return OK


# ------------------------------------------------------------------ replay
def cmd_replay(args: argparse.Namespace, out: Out) -> int:
    """Stream records the local pump set aside: list them, or hand one (or all) to its stream function."""
    from scripts.local.handlers import stream_handlers
    from scripts.local.stream_failures import FailureStore

    if args.stage != "local":
        out("in AWS a stream batch that exhausted its retries is in the stream failure queue "
            "(StreamFailureQueueUrl): README.md, Operations, StreamFailureQueueAlarm")
        return USAGE
    store = FailureStore()
    entries = store.list()
    if not args.id and not args.all:
        if args.json:
            out(json.dumps([e.summary() for e in entries], indent=2))
        else:
            out(f"{len(entries)} record(s) set aside" + (": replay one with clarify-ops replay ID" if entries else ""))
            for e in entries:
                keys = json.dumps(e.record.get("dynamodb", {}).get("Keys"))
                out(f"  {e.id}  {e.table}  {e.record.get('eventName')}  keys {keys}  {e.attempts} attempts, "
                    f"set aside {e.set_aside_at}")
        return OK
    ids = [e.id for e in entries] if args.all else [args.id]
    handlers = stream_handlers()
    results = {}
    for entry_id in ids:
        if store.get(entry_id) is None:
            return _not_found(args, out, f"no set-aside record {entry_id!r}")
        results[entry_id] = store.replay(entry_id, handlers)
    if args.json:
        out(json.dumps({"replayed": [i for i, ok in results.items() if ok],
                        "still_failing": [i for i, ok in results.items() if not ok]}))
    else:
        for entry_id, ok in results.items():
            out(f"{entry_id}: {'replayed' if ok else 'still failing: it stays set aside'}")
    return OK if all(results.values()) else FAILED


# ------------------------------------------------------------------ identity (docs/operations-users.md)
def _stage_name(args: argparse.Namespace, kind: str) -> str:
    """The stage's resource name as the template (and the local stack) names it: <app>-<stage>-<kind>."""
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    return f"{config['app_name']}-{args.stage}-{kind}"


def cmd_user(args: argparse.Namespace, out: Out) -> int:
    from chalicelib import aws
    from scripts.local.identity import add_user, find_pool

    cognito = aws.client("cognito-idp")
    pool_id = os.environ.get("CLARIFY_USER_POOL_ID") or (find_pool(cognito, _stage_name(args, "users")) or ("",))[0]
    if not pool_id:
        return _not_found(args, out, f"no user pool {_stage_name(args, 'users')} (is the stage deployed?)")
    try:
        add_user(cognito, pool_id, args.email, args.workspace)
    except ValueError as exc:
        out(json.dumps({"error": "conflict", "message": str(exc)}) if args.json else str(exc))
        return FAILED
    message = (f"{args.email} is in workspace {args.workspace}; a new user gets a temporary password by email and "
               "chooses their own at first sign-in")
    out(json.dumps({"email": args.email, "workspace": args.workspace, "user_pool": pool_id}) if args.json
        else message)
    return OK


def cmd_agent_keys(args: argparse.Namespace, out: Out) -> int:
    from chalicelib import aws
    from chalicelib.auth.agent_keys import Keyring, rotated

    name = os.environ.get("CLARIFY_AGENT_KEYS_SECRET") or _stage_name(args, "agent-keys")
    manager = aws.client("secretsmanager")
    ring = rotated(Keyring.parse(manager.get_secret_value(SecretId=name)["SecretString"]))
    manager.put_secret_value(SecretId=name, SecretString=ring.dumps())
    previous = sorted(set(ring.keys) - {ring.current})
    out(json.dumps({"secret": name, "current": ring.current, "also_valid": previous}) if args.json
        else f"{name}: signing with {ring.current}; {', '.join(previous)} stays valid until the next rotation")
    return OK


# ------------------------------------------------------------------ main
def _not_found(args: argparse.Namespace, out: Out, message: str) -> int:
    out(json.dumps({"error": "not_found", "message": message}) if args.json else message)
    return NOT_FOUND


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="clarify-ops", description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--stage", default="local", help="a stage of .chalice/config.json (default: local)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub = p.add_subparsers(dest="verb", required=True)
    s = sub.add_parser("session", help="one aggregate decoded: states, rows, intents, deadlines, the rule")
    s.add_argument("id")
    sub.add_parser("outstanding", help="what the reconciler would touch, and quarantined sessions")
    r = sub.add_parser("reconcile", help="run the reconciler now (scheduled: only overdue work)")
    r.add_argument("--before-traffic", action="store_true", help="repair everything, then set the traffic flag")
    r.add_argument("--invoke", action="store_true", help="invoke the stage's deployed function instead")
    rel = sub.add_parser("release", help="lift a quarantine after the session was repaired")
    rel.add_argument("id")
    rep = sub.add_parser("replay", help="list set-aside stream records, or replay one (or --all)")
    rep.add_argument("id", nargs="?")
    rep.add_argument("--all", action="store_true")
    u = sub.add_parser("user", help="add a user of the stage's user pool to a workspace")
    u.add_argument("action", choices=["add"])
    u.add_argument("email")
    u.add_argument("--workspace", required=True)
    k = sub.add_parser("agent-keys", help="rotate the agent-token signing key (the previous one stays valid)")
    k.add_argument("action", choices=["rotate"])
    return p


VERBS: dict[str, Callable[[argparse.Namespace, Out], int]] = {
    "session": cmd_session, "outstanding": cmd_outstanding, "reconcile": cmd_reconcile, "release": cmd_release,
    "replay": cmd_replay, "user": cmd_user, "agent-keys": cmd_agent_keys}


def main(argv: list[str] | None = None, out: Out = print) -> int:
    args = parser().parse_args(argv)
    configure(args.stage)
    from chalicelib.domain.errors import StoreUnavailable

    try:
        return VERBS[args.verb](args, out)
    except StoreUnavailable as exc:
        out(json.dumps({"error": "store_unavailable", "message": str(exc)}) if args.json
            else f"the store did not answer: {exc}")
        return FAILED


if __name__ == "__main__":
    sys.exit(main())
