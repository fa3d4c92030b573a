// `prism serve` and `prism demo` start-up: bad configs stop it with FILE:LINE: key, a port in
// use stops it, a task without an engine stops it (all exit 1), a bad PRISM_THREADS stops any
// command (exit 2); the demo set is written and served; CLI flags override the file.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { startServer, runPrism, writeConfig, tempDir, curl, json } from './lib/server.mjs';

test('an invalid config stops start-up naming the file, line and key (exit 1)', async () => {
  const cases = [
    ['[[deployment]]\nname = "a"\ntask = "echo"\nreplicas = "two"\n', 4, "deployment[0].replicas"],
    ['[server]\nport = 8080\nhots = "x"\n', 3, 'server.hots'],
    ['[[deployment]]\nname = "a"\ntask = "echo"\n\n[[deployment]]\nname = "a"\ntask = "echo"\n', 6, 'deployment[1].name'],
    ['[server]\n[server.limits]\nread_timeout_ms = -5\n', 3, 'server.limits.read_timeout_ms'],
    ['[[deployment]]\nname = "a"\ntask = "dance"\n', 3, 'deployment[0].task'],
  ];
  for (const [text, line, key] of cases) {
    const file = writeConfig(text);
    const r = await runPrism(['serve', '--config', file, '--port', '0']);
    assert.equal(r.code, 1, r.stderr + r.stdout);
    assert.ok(r.stderr.includes(`${file}:${line}: key '${key}'`), `expected ${file}:${line}: key '${key}' in: ${r.stderr}`);
  }
  const syntax = writeConfig('[server\nport = 1\n');
  const r = await runPrism(['serve', '--config', syntax]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, new RegExp(`${syntax}:1:\\d+: TOML syntax error`));
  const missing = await runPrism(['serve', '--config', '/nonexistent/prism.toml']);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /cannot read config file \/nonexistent\/prism.toml/);
});

test('a PRISM_THREADS that is not a positive integer is refused (exit 2)', async () => {
  for (const value of ['abc', '0', '-3', '2x']) {
    const r = await runPrism(['--version'], { env: { PRISM_THREADS: value } });
    assert.equal(r.code, 0, 'flags that exit before any work ignore it');
    const info = await runPrism(['demo', 'init', tempDir()], { env: { PRISM_THREADS: value } });
    assert.equal(info.code, 2, info.stderr);
    assert.ok(info.stderr.includes(`PRISM_THREADS must be a positive integer, got '${value}'`), info.stderr);
  }
});

test('a port in use stops start-up with a clear error (exit 1)', async () => {
  const blocker = net.createServer();
  await new Promise((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  try {
    const port = blocker.address().port;
    const file = writeConfig('[[deployment]]\nname = "echo"\ntask = "echo"\n');
    const r = await runPrism(['serve', '--config', file, '--port', String(port)]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}: .*[Aa]ddress already in use`));
  } finally {
    blocker.close();
  }
});

test('--embed on a folder that holds no model: a clear error (exit 1)', async () => {
  const dir = tempDir();
  const r = await runPrism(['serve', '--embed', dir, '--port', '0']);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, new RegExp(`cannot open '${dir}/config\\.json'`));
});

test('CLI flags override the file', async () => {
  // The file says port 1 on a host that is not loopback; --host/--port win.
  const s = await startServer({ config: '[server]\nhost = "0.0.0.0"\nport = 1\n[[deployment]]\nname = "e"\ntask = "echo"\n', args: ['--host', '127.0.0.1'] });
  try {
    assert.equal(s.host, '127.0.0.1');
    assert.notEqual(s.port, 1);
    const cfg = /config: (\{.*\})/.exec(s.logs());
    assert.ok(cfg, 'the resolved config is logged once');
    assert.equal(JSON.parse(cfg[1]).server.host, '127.0.0.1');
    assert.equal((s.logs().match(/config: \{/g) ?? []).length, 1);
    assert.match(s.logs(), /prism \S+ starting \| cpu: .* \| features: .* \| kernels: (avx2|avx512|avx512_bf16|amx)\n/);
    assert.match(s.logs(), /compute pool: \d+ threads \(default: \d+ \(affinity: \d+ of \d+ CPUs; cgroup quota: [^)]*\).*\| wait: \S+ /);
  } finally {
    assert.equal(await s.stop('SIGINT'), 0);
  }
});

test('prism demo init writes the demo set; serve without --config serves it', async () => {
  const dir = path.join(tempDir(), 'demo');
  const init = await runPrism(['demo', 'init', dir]);
  assert.equal(init.code, 0, init.stderr);
  assert.ok(fs.existsSync(path.join(dir, 'prism.toml')));
  assert.ok(fs.statSync(path.join(dir, 'echo')).isDirectory());
  const again = await runPrism(['demo', 'init', dir]);
  assert.match(again.stdout, /is complete/);

  const fresh = path.join(tempDir(), 'fresh');  // created by serve itself
  const s = await startServer({ config: null, args: ['--demo-dir', fresh] });
  try {
    assert.match(s.logs(), /demo weights are random: every output is meaningless/i);
    assert.match(s.logs(), /Hugging Face/);
    assert.ok(fs.existsSync(path.join(fresh, 'prism.toml')));
    const models = await curl([s.url + '/v1/models']);
    assert.deepEqual(json(models.body).data.map((m) => m.id), ['echo', 'demo-embed', 'demo-chat', 'demo-vlm', 'demo-clip', 'demo-asr', 'demo-image']);
    const r = await curl(['-X', 'POST', '--data-binary', '{"model":"echo","input":"demo"}', s.url + '/v1/prism/echo']);
    assert.equal(json(r.body).output, 'demo');
  } finally {
    assert.equal(await s.stop(), 0);
  }
});
