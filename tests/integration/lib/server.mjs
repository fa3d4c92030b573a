// Starting and stopping `prism serve` for the integration tests, and a curl wrapper for raw
// HTTP. Each server gets a free loopback port from the OS (--port 0) and the tests read the
// bound port from its "serving N deployment(s) on http://HOST:PORT" start-up line, so test
// files can run in parallel with each other and with the rest of the suite.
import { spawn, execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const PRISM_BIN = process.env.PRISM_BIN;
if (!PRISM_BIN || !fs.existsSync(PRISM_BIN)) {
  throw new Error(`PRISM_BIN must name the built prism binary (got '${PRISM_BIN}'); ctest sets it`);
}

// The usual test config: a fast echo deployment with a small queue, and a slow one (each
// batch sleeps) to keep requests in flight; a short read timeout for the slow-headers case.
export const TEST_CONFIG = `
[server]
host = "127.0.0.1"
port = 8080            # overridden with --port 0

[server.limits]
read_timeout_ms = 1000
idle_timeout_ms = 5000
max_body_bytes = 1048576
shutdown_grace_ms = 5000

[[deployment]]
name = "echo"
task = "echo"
[deployment.batching]
max_batch_size = 8
queue_capacity = 64

[[deployment]]
name = "slow"
task = "echo"
[deployment.knobs]
delay_us = 400000
[deployment.batching]
max_batch_size = 1
queue_capacity = 2
`;

// Temporary folders (configs, demo sets, big bodies), removed when the test process exits.
const tempDirs = [];
process.on('exit', () => { for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true }); });

export function tempDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'prism-it-'));
  tempDirs.push(dir);
  return dir;
}

export function writeConfig(text, dir = tempDir()) {
  const file = path.join(dir, 'prism.toml');
  fs.writeFileSync(file, text);
  return file;
}

// Runs prism to completion (for start-up errors): {code, stdout, stderr}.
export function runPrism(args, { timeoutMs = 20000, env = {} } = {}) {
  return new Promise((resolve) => {
    execFile(PRISM_BIN, args, { timeout: timeoutMs, env: { ...process.env, PRISM_THREADS: '1', ...env } },
      (err, stdout, stderr) => resolve({ code: err ? (err.code ?? 1) : 0, signal: err?.signal, stdout, stderr }));
  });
}

// Starts `prism serve ARGS` and waits until it serves. Returns {url, host, port, proc, logs(),
// stop(signal) → exit code, exited}.
export async function startServer({ config = TEST_CONFIG, args = [] } = {}) {
  const argv = ['serve'];
  if (config !== null) argv.push('--config', writeConfig(config));
  argv.push('--port', '0', ...args);
  const proc = spawn(PRISM_BIN, argv, { env: { ...process.env, PRISM_THREADS: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
  const ready = new Promise((resolve, reject) => {
    const onData = (d) => {
      out += d;
      const m = /serving \d+ deployment\(s\) on http:\/\/([^:\s]+):(\d+)/.exec(out);
      if (m) resolve({ host: m[1], port: Number(m[2]) });
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    exited.then((code) => reject(new Error(`prism serve exited (${code}) before serving:\n${out}`)));
    setTimeout(() => reject(new Error(`prism serve did not start within 20 s:\n${out}`)), 20000).unref();
  });
  let where;
  try {
    where = await ready;
  } catch (e) {
    proc.kill('SIGKILL');
    throw e;
  }
  const url = `http://${where.host}:${where.port}`;
  return {
    url, host: where.host, port: where.port, proc, exited,
    logs: () => out,
    async stop(signal = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      const t = setTimeout(() => proc.kill('SIGKILL'), 15000);
      const code = await exited;
      clearTimeout(t);
      return code;
    },
  };
}

// curl ARGS → {status, headers (lower-case names; the last response's), body, code (curl's exit)}.
export function curl(args, { timeoutMs = 30000 } = {}) {
  const dir = tempDir();
  const bodyFile = path.join(dir, 'body');
  const headerFile = path.join(dir, 'headers');
  return new Promise((resolve) => {
    execFile('curl', ['-sS', '-o', bodyFile, '-D', headerFile, '-w', '%{http_code}', ...args],
      { timeout: timeoutMs, maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
        const read = (f) => (fs.existsSync(f) ? fs.readFileSync(f, 'utf8') : '');
        const blocks = read(headerFile).split(/\r\n\r\n/).filter((b) => b.trim());
        const headers = {};
        for (const line of (blocks.at(-1) ?? '').split('\r\n').slice(1)) {
          const i = line.indexOf(':');
          if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
        }
        const body = read(bodyFile);
        fs.rmSync(dir, { recursive: true, force: true });
        resolve({ status: Number(stdout) || 0, headers, body, code: err ? err.code : 0, stderr });
      });
  });
}

export function json(body) {
  try { return JSON.parse(body); } catch { return undefined; }
}

// The OpenAI error object of a response body, checked for shape.
export function openaiError(body) {
  const j = json(body);
  if (!j || typeof j.error !== 'object') throw new Error(`not an OpenAI error body: ${body}`);
  for (const k of ['message', 'type', 'param', 'code']) {
    if (!(k in j.error)) throw new Error(`error body lacks '${k}': ${body}`);
  }
  return j.error;
}

// A value of a metric series in Prometheus text (sum over series matching every label).
export function metricValue(text, name, labels = {}) {
  let sum = 0;
  let found = false;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    const m = /^([^{\s]+)(\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const ls = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => ls[k] === v)) {
      sum += Number(m[3]);
      found = true;
    }
  }
  return found ? sum : undefined;
}
