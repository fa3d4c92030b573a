// Raw HTTP with curl against a running `prism serve`: the operational routes, the echo route,
// and every bad-input case, each followed by a good request proving the server still serves.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, curl, json, openaiError, metricValue, tempDir } from './lib/server.mjs';

let server;
before(async () => { server = await startServer(); });
after(async () => {
  const code = await server.stop();
  assert.equal(code, 0, 'graceful shutdown exits 0');
});

const post = (route, body, extra = []) =>
  curl(['-X', 'POST', '-H', 'Content-Type: application/json', '--data-binary', body, ...extra, server.url + route]);

// The good request every bad one is followed by.
async function assertServes() {
  const r = await post('/v1/prism/echo', JSON.stringify({ model: 'echo', input: { still: 'serving' } }));
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(json(r.body).output, { still: 'serving' });
}

test('GET /health is 200 with a request id', async () => {
  const r = await curl([server.url + '/health']);
  assert.equal(r.status, 200);
  assert.deepEqual(json(r.body), { status: 'ok' });
  assert.match(r.headers['x-request-id'], /\S+/);
  const mine = await curl(['-H', 'x-request-id: my-id-42', server.url + '/health']);
  assert.equal(mine.headers['x-request-id'], 'my-id-42');
});

test('GET /ready is 200 when every deployment is loaded', async () => {
  const r = await curl([server.url + '/ready']);
  assert.equal(r.status, 200, r.body);
  assert.deepEqual(json(r.body).deployments, { echo: 'ready', slow: 'ready' });
});

test('GET /v1/models lists the deployments in OpenAI shape', async () => {
  const r = await curl([server.url + '/v1/models']);
  assert.equal(r.status, 200);
  const j = json(r.body);
  assert.equal(j.object, 'list');
  assert.deepEqual(j.data.map((m) => m.id), ['echo', 'slow']);
  for (const m of j.data) {
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'prism');
    assert.equal(typeof m.created, 'number');
    assert.equal(m.prism.task, 'echo');
    assert.equal(m.prism.modality, 'test');
    assert.equal(m.prism.precision, 'f32');
  }
  const one = await curl([server.url + '/v1/models/slow']);
  assert.equal(json(one.body).id, 'slow');
  const none = await curl([server.url + '/v1/models/nope']);
  assert.equal(none.status, 404);
  assert.equal(openaiError(none.body).code, 'model_not_found');
});

test('POST /v1/prism/echo round trip, bulk lane, per-request engine error', async () => {
  const input = { text: 'héllo', n: [1, 2.5, null, true] };
  const r = await post('/v1/prism/echo', JSON.stringify({ model: 'echo', input }));
  assert.equal(r.status, 200, r.body);
  const j = json(r.body);
  assert.equal(j.object, 'prism.echo');
  assert.equal(j.model, 'echo');
  assert.deepEqual(j.output, input);
  assert.equal(j.id, r.headers['x-request-id']);
  const bulk = await post('/v1/prism/echo', JSON.stringify({ model: 'echo', input: 7, priority: 'bulk' }));
  assert.equal(json(bulk.body).output, 7);
  const failed = await post('/v1/prism/echo', JSON.stringify({ model: 'echo', input: 'error:boom' }));
  assert.equal(failed.status, 400);
  assert.equal(openaiError(failed.body).message, 'boom');
  await assertServes();
});

test('POST /v1/prism/echo with stream: SSE events then [DONE]', async () => {
  const r = await post('/v1/prism/echo', JSON.stringify({ model: 'echo', input: ['a', { b: 1 }, 3], stream: true }), ['-N']);
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/event-stream/);
  const events = r.body.split('\n\n').filter((e) => e.trim()).map((e) => e.replace(/^data: /, ''));
  assert.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  assert.deepEqual(chunks.map((c) => c.output), ['a', { b: 1 }, 3]);
  assert.deepEqual(chunks.map((c) => c.index), [0, 1, 2]);
  assert.ok(chunks.every((c) => c.object === 'prism.echo.chunk'));
});

test('malformed JSON is a 400 JSON error', async () => {
  for (const body of ['{"model": "echo", "input": ', 'not json', '[1, 2]', '']) {
    const r = await post('/v1/prism/echo', body);
    assert.equal(r.status, 400, `${body}: ${r.body}`);
    assert.equal(openaiError(r.body).type, 'invalid_request_error');
  }
  await assertServes();
});

test('wrong types are a 400 naming the field', async () => {
  const cases = [
    [{ model: 5, input: 1 }, 'model'],
    [{ input: 1 }, 'model'],
    [{ model: 'echo' }, 'input'],
    [{ model: 'echo', input: 1, stream: 'yes' }, 'stream'],
    [{ model: 'echo', input: 1, priority: 'urgent' }, 'priority'],
    [{ model: 'echo', input: 1, priority: 3 }, 'priority'],
  ];
  for (const [body, field] of cases) {
    const r = await post('/v1/prism/echo', JSON.stringify(body));
    assert.equal(r.status, 400, r.body);
    const e = openaiError(r.body);
    assert.equal(e.param, field, r.body);
    assert.match(e.message, new RegExp(`'${field}'`));
    await assertServes();
  }
});

test('an unknown model is a 404; an unknown route 404; a wrong method 405', async () => {
  const r = await post('/v1/prism/echo', JSON.stringify({ model: 'nope', input: 1 }));
  assert.equal(r.status, 404);
  const e = openaiError(r.body);
  assert.equal(e.code, 'model_not_found');
  assert.equal(e.param, 'model');
  await assertServes();
  const route = await curl([server.url + '/v1/nothing/here']);
  assert.equal(route.status, 404);
  openaiError(route.body);
  const method = await curl([server.url + '/v1/prism/echo']);
  assert.equal(method.status, 405);
  assert.match(method.headers.allow, /POST/);
  openaiError(method.body);
  await assertServes();
});

test('a 100 MB body is refused with 413 (Content-Length and chunked)', async () => {
  const dir = tempDir();
  const big = path.join(dir, 'big.json');
  fs.writeFileSync(big, Buffer.alloc(100 * 1000 * 1000, 0x20));  // 100 MB of spaces
  try {
    // Declared length: refused before the body is read; curl sends it for real (no Expect).
    const sized = await curl(['-X', 'POST', '-H', 'Expect:', '-H', 'Content-Type: application/json',
      '--data-binary', '@' + big, server.url + '/v1/prism/echo']);
    assert.equal(sized.status, 413, `curl: ${sized.code} ${sized.stderr}`);
    assert.equal(openaiError(sized.body).code, 'request_too_large');
    await assertServes();
    // Chunked: refused when the body crosses the limit.
    const chunked = await curl(['-X', 'POST', '-H', 'Expect:', '-H', 'Transfer-Encoding: chunked',
      '-H', 'Content-Type: application/json', '-T', big, server.url + '/v1/prism/echo']);
    assert.equal(chunked.status, 413, `curl: ${chunked.code} ${chunked.stderr}`);
    await assertServes();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('/metrics is Prometheus text with the deployment series', async () => {
  await assertServes();
  const r = await curl([server.url + '/metrics']);
  assert.equal(r.status, 200);
  assert.equal(r.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  assert.ok(metricValue(r.body, 'prism_requests_total', { deployment: 'echo', status: 'ok' }) >= 1, r.body);
  assert.ok(metricValue(r.body, 'prism_request_seconds_count', { deployment: 'echo' }) >= 1);
  assert.ok(metricValue(r.body, 'prism_queue_seconds_count', { deployment: 'echo' }) >= 1);
  assert.ok(metricValue(r.body, 'prism_batch_size_count', { deployment: 'echo' }) >= 1);
  assert.ok(metricValue(r.body, 'prism_batch_tokens_count', { deployment: 'echo' }) >= 1);
  assert.notEqual(metricValue(r.body, 'prism_queue_depth', { deployment: 'slow' }), undefined);
  assert.notEqual(metricValue(r.body, 'prism_running_requests', { deployment: 'slow' }), undefined);
  assert.ok(metricValue(r.body, 'prism_process_resident_memory_bytes') > 1e6);
  assert.match(r.body, /# TYPE prism_request_seconds histogram/);
});
