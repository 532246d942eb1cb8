// Your own messages, shown the moment you send them (an "echo"), before the server's transcript has them.
//
// An echo is {clientMessageId, content, at, status: "sending"|"sent"|"queued"|"steered"|"failed"|"unknown",
// messageId?, turnId?, error?}. It is dropped once the transcript holds its message id. Until then it sits just
// before the first message of its own turn (the agent's reply may be stored first), else at the end.

export function withEchoes(messages, echoes) {
  const list = [...(messages ?? [])];
  const ids = new Set(list.map((m) => m.id));
  for (const echo of echoes ?? []) {
    if (echo.messageId && ids.has(echo.messageId)) continue;
    const entry = { ...echo, type: "echo", id: `echo-${echo.clientMessageId}` };
    const at = echo.turnId ? list.findIndex((m) => m.turn_id === echo.turnId && m.type !== "echo") : -1;
    if (at >= 0) list.splice(at, 0, entry);
    else list.push(entry);
  }
  return list;
}

/** Echoes still worth keeping once a transcript arrived (those the server has not shown yet). */
export function pendingEchoes(messages, echoes) {
  const ids = new Set((messages ?? []).map((m) => m.id));
  return (echoes ?? []).filter((e) => !(e.messageId && ids.has(e.messageId)));
}

export function echoStatusText(echo) {
  return { sending: "Sending…", sent: "Sent", steered: "Sent into the running turn",
    queued: "Queued — the agent gets it when its current turn ends", failed: "Not sent",
    unknown: "Not confirmed" }[echo.status] ?? "";
}
