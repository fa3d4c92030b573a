// A WebSocket client (npm `ws`) on /v1/prism/echo/ws: JSON and binary messages through the
// echo deployment, errors as OpenAI error messages, auth on the upgrade, unknown models.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, curl, json } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';

const { default: WebSocket } = await importDep('ws');

const KEY = 'ws-key';
let server;
before(async () => { server = await startServer({ args: ['--api-key', KEY] }); });
after(async () => { assert.equal(await server.stop(), 0); });

const wsUrl = (model) => `ws://${server.host}:${server.port}/v1/prism/echo/ws${model ? `?model=${model}` : ''}`;

// Opens a socket; messages are queued so none is missed. next() → {data, binary}.
function open(model, key = KEY) {
  const ws = new WebSocket(wsUrl(model), { headers: key ? { authorization: `Bearer ${key}` } : {} });
  const queue = [];
  const waiters = [];
  ws.on('message', (data, binary) => {
    const m = { data: binary ? data : data.toString(), binary };
    const w = waiters.shift();
    if (w) w(m); else queue.push(m);
  });
  const closed = new Promise((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  const opened = new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); ws.once('unexpected-response', (_, res) => reject(Object.assign(new Error('refused'), { status: res.statusCode }))); });
  const next = () => new Promise((resolve, reject) => {
    if (queue.length) return resolve(queue.shift());
    waiters.push(resolve);
    setTimeout(() => reject(new Error('no message within 10 s')), 10000).unref();
  });
  return { ws, opened, closed, next };
}

test('JSON messages come back through the echo deployment, in order', async () => {
  const c = open('echo');
  await c.opened;
  const inputs = [{ a: 1 }, 'two', [3, 3, 3], null];
  for (const x of inputs) c.ws.send(JSON.stringify(x));
  for (const x of inputs) {
    const m = await c.next();
    assert.equal(m.binary, false);
    assert.deepEqual(json(m.data), { object: 'prism.echo', model: 'echo', output: x });
  }
  c.ws.close(1000, 'bye');
  assert.equal((await c.closed).code, 1000);
});

test('binary messages come back unchanged; bad JSON is an error message, the socket stays open', async () => {
  const c = open('echo');
  await c.opened;
  const bytes = Buffer.from([0, 1, 2, 250, 255]);
  c.ws.send(bytes);
  const m = await c.next();
  assert.equal(m.binary, true);
  assert.deepEqual(Buffer.from(m.data), bytes);
  c.ws.send('{not json');
  const err = json((await c.next()).data);
  assert.equal(err.error.type, 'invalid_request_error');
  c.ws.send(JSON.stringify('error:engine says no'));
  assert.equal(json((await c.next()).data).error.message, 'engine says no');
  c.ws.send(JSON.stringify('still open'));
  assert.equal(json((await c.next()).data).output, 'still open');
  c.ws.close();
});

test('an unknown model: an error message, then close 1008', async () => {
  const c = open('nope');
  await c.opened;
  const err = json((await c.next()).data);
  assert.equal(err.error.code, 'model_not_found');
  assert.equal((await c.closed).code, 1008);
});

test('the upgrade needs the API key; a plain GET is 426', async () => {
  const c = open('echo', 'wrong');
  await assert.rejects(c.opened, (e) => e.status === 401);
  const plain = await curl(['-H', `Authorization: Bearer ${KEY}`, `${server.url}/v1/prism/echo/ws?model=echo`]);
  assert.equal(plain.status, 426);
  const health = await curl([server.url + '/health']);
  assert.equal(health.status, 200);
});
