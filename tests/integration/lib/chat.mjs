// Helpers of the chat integration tests: raw POSTs to the generate routes, and a reader of
// Server-Sent Events that keeps every event as sent (the SDK hides [DONE] and error events).

// POST path body → {status, headers, text, body (parsed JSON or undefined)}.
export async function postJson(server, path, body, { signal } = {}) {
  const r = await fetch(server.url + path, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal,
  });
  const text = await r.text();
  let parsed;
  try { parsed = JSON.parse(text); } catch { parsed = undefined; }
  return { status: r.status, headers: r.headers, text, body: parsed };
}

// The data of each event of an SSE body, in order ("[DONE]" kept as a string, JSON parsed).
export function sseEvents(text) {
  const events = [];
  for (const block of text.split('\n\n')) {
    const data = block.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
    if (!data) continue;
    events.push(data === '[DONE]' ? data : JSON.parse(data));
  }
  return events;
}

// Streams POST path body and calls onEvent(data) per event until it returns true (then the
// request is aborted: the client goes away) or the stream ends. Returns the events seen.
export async function streamUntil(server, path, body, onEvent) {
  const controller = new AbortController();
  const r = await fetch(server.url + path, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
    signal: controller.signal,
  });
  if (r.status !== 200) throw new Error(`${path}: status ${r.status}: ${await r.text()}`);
  const reader = r.body.getReader();
  const decoder = new TextDecoder();
  const seen = [];
  let buf = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return seen;
      buf += decoder.decode(value, { stream: true });
      let end;
      while ((end = buf.indexOf('\n\n')) >= 0) {
        const events = sseEvents(buf.slice(0, end + 2));
        buf = buf.slice(end + 2);
        for (const e of events) {
          seen.push(e);
          if (onEvent(e)) {
            controller.abort();
            return seen;
          }
        }
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') return seen;
    throw e;
  }
}

// Polls fn() every 100 ms until it returns a truthy value or timeoutMs passes (then the last
// value). For state that settles asynchronously (metrics after a cancel); never a timing assert.
export async function poll(fn, timeoutMs = 10000) {
  const end = Date.now() + timeoutMs;
  let v;
  for (;;) {
    v = await fn();
    if (v || Date.now() > end) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
}
