// A deployment that fails to load never takes the server down: with one echo deployment that
// loads, one whose model directory does not exist and one whose config.json is corrupt (its
// load fails on the replica thread), `prism serve` serves echo; /v1/models and /ready name
// the failed ones with their reasons; requests to them get a 503 OpenAI error naming the
// model and the reason. --strict (or [server] strict = true) stops start-up instead (exit 1),
// and so does a config where every deployment fails.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, runPrism, writeConfig, tempDir, curl, json, openaiError } from './lib/server.mjs';

const dir = tempDir();
const missingDir = path.join(dir, 'does-not-exist');
const corruptDir = path.join(dir, 'corrupt');
fs.mkdirSync(corruptDir);
fs.writeFileSync(path.join(corruptDir, 'config.json'), '{"model_type": "bert", ');  // cut short

const GOOD = '[[deployment]]\nname = "echo"\ntask = "echo"\n';
const MISSING = `[[deployment]]\nname = "missing"\ntask = "embed"\nmodel = "${missingDir}"\n`;
const CORRUPT = `[[deployment]]\nname = "corrupt"\ntask = "embed"\nmodel = "${corruptDir}"\n`;
const CONFIG = GOOD + MISSING + CORRUPT;

const postJson = (url, body) =>
  curl(['-X', 'POST', '-H', 'Content-Type: application/json', '--data-binary', JSON.stringify(body), url]);

describe('one good deployment, two that fail to load', () => {
  let server;
  before(async () => { server = await startServer({ config: CONFIG }); });
  after(async () => { assert.equal(await server.stop(), 0, 'graceful shutdown exits 0'); });

  test('start-up logs each failure once (error) and goes on without it (warn)', () => {
    const logs = server.logs();
    assert.match(logs, /serving 1 deployment\(s\) on http:\/\/\S+ \(failed to load, not served: missing, corrupt\)/);
    for (const name of ['missing', 'corrupt']) {
      const failures = logs.split('\n').filter((l) => l.includes(`deployment ${name} failed to load: `));
      assert.equal(failures.length, 1, `one error line for ${name}:\n${logs}`);
      assert.match(failures[0], /\berror\b/i);
      assert.match(logs, new RegExp(`warn.*deployment ${name} is not served: the server continues`, 'i'));
    }
    assert.match(logs, /no such model directory/);
    assert.match(logs, /config\.json: not valid JSON/);
  });

  test('the good deployment answers', async () => {
    const r = await postJson(server.url + '/v1/prism/echo', { model: 'echo', input: 'still here' });
    assert.equal(r.status, 200, r.body);
    assert.equal(json(r.body).output, 'still here');
  });

  test('/v1/models lists the failed deployments with their state and reason', async () => {
    const r = await curl([server.url + '/v1/models']);
    assert.equal(r.status, 200, r.body);
    const list = json(r.body);
    assert.equal(list.object, 'list');
    assert.deepEqual(list.data.map((m) => m.id), ['echo', 'missing', 'corrupt']);
    const [echo, missing, corrupt] = list.data;
    assert.equal(echo.prism.state, 'ready');
    assert.equal(echo.prism.ready, true);
    assert.equal(echo.prism.error, undefined);
    for (const m of [missing, corrupt]) {
      assert.equal(m.object, 'model');
      assert.equal(m.owned_by, 'prism');
      assert.equal(m.prism.task, 'embed');
      assert.equal(m.prism.state, 'failed');
      assert.equal(m.prism.ready, false);
    }
    assert.match(missing.prism.error, /^deployment missing: .*key 'deployment\[1\]\.model': no such model directory/);
    assert.match(corrupt.prism.error, /^deployment corrupt replica 0: .*config\.json: not valid JSON/);

    const one = await curl([server.url + '/v1/models/corrupt']);
    assert.equal(one.status, 200, one.body);
    assert.equal(json(one.body).prism.state, 'failed');
    assert.equal(json(one.body).prism.error, corrupt.prism.error);
  });

  test('/ready is 503 naming each failed deployment with its reason', async () => {
    const r = await curl([server.url + '/ready']);
    assert.equal(r.status, 503, r.body);
    const j = json(r.body);
    assert.equal(j.status, 'not_ready');
    assert.deepEqual(j.deployments, { echo: 'ready', missing: 'failed', corrupt: 'failed' });
    assert.deepEqual(Object.keys(j.failed), ['corrupt', 'missing'].sort());
    assert.match(j.failed.missing, /no such model directory/);
    assert.match(j.failed.corrupt, /config\.json: not valid JSON/);
    const e = openaiError(r.body);
    assert.equal(e.code, 'service_unavailable');
    assert.match(e.message, /^Not ready: missing \(failed: .*\), corrupt \(failed: .*\)\.$/);
  });

  test('a request to a failed deployment gets a 503 naming it and the reason, at once', async () => {
    for (const [name, reason] of [['corrupt', /config\.json: not valid JSON/], ['missing', /no such model directory/]]) {
      const r = await postJson(server.url + '/v1/embeddings', { model: name, input: 'hello' });
      assert.equal(r.status, 503, r.body);
      assert.equal(r.headers['retry-after'], undefined, 'retrying does not help');
      const e = openaiError(r.body);
      assert.equal(e.type, 'server_error');
      assert.equal(e.code, 'model_load_failed');
      assert.match(e.message, new RegExp(`^The model '${name}' failed to load and is not served: `));
      assert.match(e.message, reason);
    }
    // Still a 404 for a model no deployment has, and the good one still answers.
    const none = await postJson(server.url + '/v1/embeddings', { model: 'nope', input: 'hello' });
    assert.equal(none.status, 404);
    const ok = await postJson(server.url + '/v1/prism/echo', { model: 'echo', input: 1 });
    assert.equal(ok.status, 200, ok.body);
  });
});

test('--strict: the same config stops start-up with the reason (exit 1)', async () => {
  const file = writeConfig(CONFIG);
  const r = await runPrism(['serve', '--config', file, '--port', '0', '--strict']);
  assert.equal(r.code, 1, r.stderr);
  // The first failure in config order, found before anything loads: the missing directory.
  assert.match(r.stderr, /prism serve: .*key 'deployment\[1\]\.model': no such model directory/);
  assert.doesNotMatch(r.stderr + r.stdout, /serving \d+ deployment/);

  // A load failure on the replica thread, with strict set in the file.
  const loadFails = writeConfig('[server]\nstrict = true\n' + GOOD + CORRUPT);
  const s = await runPrism(['serve', '--config', loadFails, '--port', '0']);
  assert.equal(s.code, 1, s.stderr);
  assert.match(s.stderr, /prism serve: deployment corrupt replica 0: .*config\.json: not valid JSON.*\[server\] strict/);
  assert.doesNotMatch(s.stderr + s.stdout, /serving \d+ deployment/);
});

test('every deployment failed: nothing to serve, exit 1 with each reason', async () => {
  const file = writeConfig(MISSING + CORRUPT);
  const r = await runPrism(['serve', '--config', file, '--port', '0']);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /prism serve: every deployment failed to load: /);
  assert.match(r.stderr, /deployment missing: .*no such model directory/);
  assert.match(r.stderr, /deployment corrupt replica 0: .*config\.json: not valid JSON/);
});
