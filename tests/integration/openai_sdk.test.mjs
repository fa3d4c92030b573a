// The official `openai` npm client against `prism serve`: the model list, model lookup,
// errors surfacing as openai.APIError subclasses with the right status and error fields,
// and a round trip through Prism's extension route.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';

const { default: OpenAI, APIError } = await importDep('openai');

const KEY = 'sk-prism-test';
let server;
let client;
before(async () => {
  server = await startServer({ args: ['--api-key', KEY] });
  client = new OpenAI({ apiKey: KEY, baseURL: server.url + '/v1', maxRetries: 0, timeout: 20000 });
});
after(async () => { assert.equal(await server.stop(), 0); });

test('models.list() returns the deployments', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    ids.push(m.id);
    assert.equal(m.object, 'model');
    assert.equal(m.owned_by, 'prism');
    assert.equal(m.prism.task, 'echo');
  }
  assert.deepEqual(ids, ['echo', 'slow']);
});

test('models.retrieve() finds a deployment; an unknown one is a 404 APIError', async () => {
  const m = await client.models.retrieve('echo');
  assert.equal(m.id, 'echo');
  assert.equal(m.prism.modality, 'test');
  await assert.rejects(client.models.retrieve('nope'), (e) => {
    assert.ok(e instanceof APIError && e instanceof OpenAI.NotFoundError, String(e));
    assert.equal(e.status, 404);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.code, 'model_not_found');
    assert.match(e.message, /The model 'nope' does not exist/);
    assert.match(e.requestID ?? '', /\S/);
    return true;
  });
});

test('a wrong API key is a 401 AuthenticationError', async () => {
  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL: server.url + '/v1', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
    assert.equal(e.status, 401);
    assert.equal(e.code, 'invalid_api_key');
    assert.equal(e.type, 'invalid_request_error');
    return true;
  });
});

test('client.post("/prism/echo") round trip, and a 400 naming the field', async () => {
  const r = await client.post('/prism/echo', { body: { model: 'echo', input: { hello: ['world', 1] } } });
  assert.equal(r.object, 'prism.echo');
  assert.equal(r.model, 'echo');
  assert.deepEqual(r.output, { hello: ['world', 1] });
  await assert.rejects(client.post('/prism/echo', { body: { model: 'echo', input: 1, stream: 'no' } }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.param, 'stream');
    return true;
  });
});

test('a full queue surfaces as a 429 RateLimitError', async () => {
  const calls = Array.from({ length: 6 }, (_, i) => client.post('/prism/echo', { body: { model: 'slow', input: i } }));
  const settled = await Promise.allSettled(calls);
  const limited = settled.filter((s) => s.status === 'rejected');
  assert.ok(limited.length >= 1, 'some requests are refused');
  for (const s of limited) {
    assert.ok(s.reason instanceof OpenAI.RateLimitError, String(s.reason));
    assert.equal(s.reason.status, 429);
    assert.equal(s.reason.headers.get('retry-after'), '1');
  }
  const r = await client.post('/prism/echo', { body: { model: 'echo', input: 'after' } });
  assert.equal(r.output, 'after');
});
