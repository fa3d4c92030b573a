// The server under abuse: slow headers, 1,000 concurrent connections, clients that vanish,
// a full queue, wrong API keys, and SIGTERM with a request in flight. Each case ends with a
// good request proving the server still serves.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { startServer, curl, json, openaiError, metricValue } from './lib/server.mjs';

let server;
before(async () => { server = await startServer(); });
after(async () => { assert.equal(await server.stop(), 0); });

// One request on its own connection: {status, headers, body}, or {error} when none came.
function request(url, { method = 'GET', body, headers = {}, timeoutMs = 30000 } = {}) {
  return new Promise((resolve) => {
    const req = http.request(url, { method, agent: false, headers: { 'content-type': 'application/json', ...headers } }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { data += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: data }));
      res.on('error', (error) => resolve({ error }));
    });
    req.setTimeout(timeoutMs, () => req.destroy(new Error('timed out')));
    req.on('error', (error) => resolve({ error }));
    req.end(body);
  });
}

const echo = (model, input, extra = {}) =>
  request(server.url + '/v1/prism/echo', { method: 'POST', body: JSON.stringify({ model, input, ...extra }) });

async function assertServes() {
  const r = await echo('echo', 'still serving');
  assert.equal(r.status, 200, r.body ?? String(r.error));
  assert.equal(json(r.body).output, 'still serving');
}

test('slow partial headers: the read timeout closes the connection', async () => {
  const socket = net.connect(server.port, server.host);
  await new Promise((resolve) => socket.once('connect', resolve));
  socket.write('POST /v1/prism/echo HTTP/1.1\r\nHost: x\r\nContent-Type: appl');  // and never more
  let received = '';
  socket.on('data', (d) => { received += d; });
  const closed = await new Promise((resolve) => {
    socket.once('close', () => resolve(true));
    setTimeout(() => resolve(false), 15000).unref();  // read_timeout_ms is 1 s in the test config
  });
  socket.destroy();
  assert.ok(closed, 'the server closed the stalled connection');
  assert.ok(received === '' || /^HTTP\/1\.1 4\d\d/.test(received), `unexpected answer: ${received}`);
  await assertServes();
});

test('1,000 concurrent connections all get an answer (200, or a clean 429/503)', async () => {
  const n = 1000;
  const results = await Promise.all(Array.from({ length: n }, (_, i) =>
    i % 4 === 0 ? request(server.url + '/health') : echo('echo', i)));
  const byStatus = {};
  for (const r of results) {
    const key = r.error ? `error:${r.error.code ?? r.error.message}` : String(r.status);
    byStatus[key] = (byStatus[key] ?? 0) + 1;
    if (r.error) continue;
    assert.ok([200, 429, 503].includes(r.status), `status ${r.status}: ${r.body}`);
    if (r.status !== 200) {
      openaiError(r.body);
      assert.match(r.headers['retry-after'] ?? '', /^\d+$/, 'a refusal says when to retry');
    }
  }
  console.log(`1,000 concurrent connections: ${JSON.stringify(byStatus)}`);
  assert.equal(Object.keys(byStatus).filter((k) => k.startsWith('error:')).length, 0,
    `every connection got an HTTP answer: ${JSON.stringify(byStatus)}`);
  assert.ok(byStatus['200'] >= n / 4, 'at least the health checks succeed');
  await assertServes();
});

test('a full queue answers 429 with Retry-After', async () => {
  // slow: one request a batch, 400 ms each, two may wait: the fourth at once is refused.
  const results = await Promise.all(Array.from({ length: 6 }, (_, i) => echo('slow', i)));
  const refused = results.filter((r) => r.status === 429);
  assert.ok(refused.length >= 1, JSON.stringify(results.map((r) => r.status)));
  for (const r of refused) {
    assert.equal(r.headers['retry-after'], '1');
    assert.equal(openaiError(r.body).type, 'rate_limit_error');
  }
  assert.ok(results.filter((r) => r.status === 200).length >= 2);
  await assertServes();
});

test('a client that disconnects mid-request: its queued request is cancelled', async () => {
  const before = await request(server.url + '/metrics');
  const cancelledBefore = metricValue(before.body, 'prism_requests_total', { deployment: 'slow', status: 'cancelled' }) ?? 0;
  const first = echo('slow', 'runs');  // occupies the slow engine for 400 ms
  await new Promise((r) => setTimeout(r, 50));
  // The second waits in the queue; its client goes away.
  const req = http.request(server.url + '/v1/prism/echo', { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
  req.on('error', () => {});
  req.end(JSON.stringify({ model: 'slow', input: 'abandoned' }));
  await new Promise((r) => setTimeout(r, 100));
  req.destroy();
  assert.equal((await first).status, 200);
  let cancelled = cancelledBefore;
  for (let i = 0; i < 50 && cancelled <= cancelledBefore; ++i) {
    await new Promise((r) => setTimeout(r, 100));
    const m = await request(server.url + '/metrics');
    cancelled = metricValue(m.body, 'prism_requests_total', { deployment: 'slow', status: 'cancelled' }) ?? 0;
  }
  assert.ok(cancelled > cancelledBefore, 'the metrics count the abandoned request as cancelled');
  await assertServes();
});

test('API keys: 401 without or with a wrong key, /health stays open', async () => {
  const keyed = await startServer({ args: ['--api-key', 'k-one', '--api-key', 'k-two'] });
  try {
    const body = JSON.stringify({ model: 'echo', input: 1 });
    const url = keyed.url + '/v1/prism/echo';
    const missing = await request(url, { method: 'POST', body });
    assert.equal(missing.status, 401);
    assert.equal(openaiError(missing.body).code, 'invalid_api_key');
    const wrong = await request(url, { method: 'POST', body, headers: { authorization: 'Bearer nope' } });
    assert.equal(wrong.status, 401);
    assert.equal((await request(keyed.url + '/v1/models')).status, 401);
    const health = await curl([keyed.url + '/health']);
    assert.equal(health.status, 200);
    for (const key of ['k-one', 'k-two']) {
      const ok = await request(url, { method: 'POST', body, headers: { authorization: `Bearer ${key}` } });
      assert.equal(ok.status, 200, ok.body);
    }
  } finally {
    assert.equal(await keyed.stop(), 0);
  }
});

test('SIGTERM with a request in flight: it completes, then exit 0', async () => {
  const s = await startServer();
  const inFlight = request(s.url + '/v1/prism/echo', { method: 'POST', body: JSON.stringify({ model: 'slow', input: 'finish me' }) });
  await new Promise((r) => setTimeout(r, 100));
  const code = s.stop('SIGTERM');
  const r = await inFlight;
  assert.equal(r.status, 200, r.body ?? String(r.error));
  assert.equal(json(r.body).output, 'finish me');
  assert.equal(await code, 0);
  assert.match(s.logs(), /shutting down/);
  // Stopped: nothing listens any more.
  const after = await request(s.url + '/health', { timeoutMs: 2000 });
  assert.ok(after.error, 'the port is closed after shutdown');
});
