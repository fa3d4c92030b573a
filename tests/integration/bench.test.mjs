// prism bench end to end. Every workload (chat, chat-shared-prefix, embed-online, embed-bulk,
// echo) runs against `prism serve` on the demo set, with prism's own /metrics. A mock OpenAI
// chat server written here covers what a healthy server never does: it streams SSE chunks with
// fixed delays and, by a fixed plan, fails requests with 500 and 429, cuts a stream, ends one
// without [DONE], and stalls one. The tool must count each as its kind of error, neither crash
// nor hang. Assertions are on counts and values, never on speed.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { startServer, runPrism, tempDir, json, metricValue } from './lib/server.mjs';

const BENCH_TIMEOUT_MS = 120000;

// ---- the mock OpenAI server -----------------------------------------------------------------

// What request n (1-based, counted per server) gets.
function chatPlan(n) {
  if (n === 5) return 'stall';
  if (n % 10 === 3) return '500';
  if (n % 10 === 6) return '429';
  if (n === 8) return 'cut';
  if (n === 19) return 'no-done';
  return 'ok';
}

const FIRST_TOKEN_MS = 15;
const TOKEN_GAP_MS = 3;

function startMock({ plan = chatPlan } = {}) {
  const state = { n: 0, outcomes: {}, bodies: [], metricsScrapes: 0, sockets: new Set() };
  const count = (k) => { state.outcomes[k] = (state.outcomes[k] ?? 0) + 1; };
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      if (req.method === 'GET' && req.url === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', data: [
          { id: 'mock-embed', object: 'model', prism: { task: 'embed' } },
          { id: 'mock-chat', object: 'model', prism: { task: 'chat' } }] }));
        return;
      }
      if (req.method === 'GET' && req.url === '/metrics') {
        state.metricsScrapes++;
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
        res.end('# TYPE mock_requests_total counter\n' +
          `mock_requests_total{model_name="mock-chat"} ${state.n}\n` +
          `mock_requests_total{model_name="other"} ${state.n * 100}\n` +
          '# TYPE mock_queue_seconds histogram\n' +
          `mock_queue_seconds_bucket{model_name="mock-chat",le="0.01"} ${state.n}\n` +
          `mock_queue_seconds_bucket{model_name="mock-chat",le="+Inf"} ${state.n}\n` +
          `mock_queue_seconds_sum{model_name="mock-chat"} ${state.n * 0.005}\n` +
          `mock_queue_seconds_count{model_name="mock-chat"} ${state.n}\n`);
        return;
      }
      if (req.method === 'POST' && req.url === '/v1/embeddings') {
        const j = JSON.parse(body);
        const inputs = Array.isArray(j.input) ? j.input : [j.input];
        state.n++;
        state.bodies.push(j);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ object: 'list', model: j.model,
          data: inputs.map((_, i) => ({ object: 'embedding', index: i, embedding: [0.5, 0.5] })),
          usage: { prompt_tokens: inputs.join(' ').split(' ').length, total_tokens: 0 } }));
        return;
      }
      if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'no route', type: 'invalid_request_error', param: null, code: null } }));
        return;
      }
      const n = ++state.n;
      const j = JSON.parse(body);
      state.bodies.push(j);
      const what = plan(n);
      count(what);
      if (what === '500' || what === '429') {
        res.writeHead(Number(what), { 'content-type': 'application/json', ...(what === '429' ? { 'retry-after': '1' } : {}) });
        res.end(JSON.stringify({ error: { message: `mock ${what}`, type: 'server_error', param: null, code: null } }));
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      const tokens = Math.min(j.max_tokens ?? 4, 6);
      const chunk = (delta) => `data: ${JSON.stringify({ id: `c${n}`, object: 'chat.completion.chunk', model: j.model,
        choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`;
      res.write(chunk({ role: 'assistant', content: '' }));
      if (what === 'stall') return;  // headers and one empty chunk, then nothing, ever
      let i = 0;
      const next = () => {
        if (res.destroyed) return;
        if (what === 'cut' && i === 2) { req.socket.destroy(); return; }
        if (i < tokens) {
          res.write(chunk({ content: ` w${i}` }));
          i++;
          setTimeout(next, TOKEN_GAP_MS);
          return;
        }
        if (j.stream_options?.include_usage) {
          res.write(`data: ${JSON.stringify({ id: `c${n}`, object: 'chat.completion.chunk', choices: [],
            usage: { prompt_tokens: 11, completion_tokens: tokens, total_tokens: 11 + tokens } })}\n\n`);
        }
        if (what !== 'no-done') res.write('data: [DONE]\n\n');
        res.end();
      };
      setTimeout(next, FIRST_TOKEN_MS);
    });
  });
  server.on('connection', (s) => { state.sockets.add(s); s.on('close', () => state.sockets.delete(s)); });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const url = `http://127.0.0.1:${server.address().port}`;
      resolve({
        url, state,
        close: () => new Promise((r) => { for (const s of state.sockets) s.destroy(); server.close(() => r()); }),
      });
    });
  });
}

// ---- helpers --------------------------------------------------------------------------------

async function bench(args) {
  const r = await runPrism(['bench', ...args], { timeoutMs: BENCH_TIMEOUT_MS });
  assert.ok(r.signal === undefined || r.signal === null, `prism bench was killed (${r.signal}): ${r.stderr}`);
  return r;
}

function readJson(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

const serverMetric = (point, name) => point.server.find((m) => m.name === name);

// ---- chat against the mock ------------------------------------------------------------------

describe('chat workloads against a mock OpenAI server', () => {
  let mock;
  before(async () => { mock = await startMock(); });
  after(async () => { await mock.close(); });

  test('chat: errors by kind, TTFT/ITL/TPOT, /metrics deltas; a stalled request times out', async () => {
    const dir = tempDir();
    const out = path.join(dir, 'chat.json');
    const before = mock.state.n;
    const r = await bench(['--url', mock.url, '--workload', 'chat', '--requests', '40', '--concurrency', '4',
      '--timeout', '2', '--input-tokens', '8-16', '--output-tokens', '4-8', '--json', out]);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.match(r.stderr, /model mock-chat/, 'the chat model was picked from /v1/models');
    const report = readJson(out);
    const p = report.points[0];
    assert.equal(mock.state.n - before, 40, 'the mock saw exactly the requests measured');
    const o = mock.state.outcomes;
    assert.equal(p.requests, 40);
    assert.equal(p.errors.http_500, o['500']);
    assert.equal(p.errors.http_429, o['429']);
    assert.equal(p.errors.timeout, 1, JSON.stringify(p.errors));
    assert.equal(p.errors.disconnect, 1, JSON.stringify(p.errors));
    assert.equal(p.errors.malformed, 1, JSON.stringify(p.errors));
    assert.match(p.error_examples.http_500, /mock 500/);
    assert.match(p.error_examples.malformed, /\[DONE\]/);
    assert.equal(p.ok, o.ok);
    assert.equal(p.ok + p.errors_total, 40);
    // Output tokens come from usage: min(max_tokens, 6) per answer.
    assert.equal(p.totals.output_tokens, mock.state.bodies.slice(before).reduce(
      (s, b, i) => s + (chatPlan(before + i + 1) === 'ok' ? Math.min(b.max_tokens, 6) : 0), 0));
    assert.equal(p.totals.input_tokens, 11 * p.ok);
    for (const series of ['e2e', 'ttft', 'itl', 'tpot']) {
      const s = p.latency_ms[series];
      assert.ok(s && s.count > 0, `${series} measured`);
      assert.ok(s.p50 <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.max, `${series} percentiles ordered`);
    }
    assert.equal(p.latency_ms.ttft.count, p.ok);
    // Causality, not speed: no token can arrive before the mock sends it.
    assert.ok(p.latency_ms.ttft.min >= FIRST_TOKEN_MS - 1, `ttft min ${p.latency_ms.ttft.min}`);
    assert.ok(p.latency_ms.e2e.min >= p.latency_ms.ttft.min);
    // Server figures: only the model's series, after minus before.
    assert.equal(serverMetric(p, 'mock_requests_total').delta, 40);
    assert.equal(serverMetric(p, 'mock_queue_seconds').count, 40);
    assert.match(r.stdout, /ttft/);
    assert.match(r.stdout, /http_429 \d+ \(mock 429\)/);
  });

  test('the same seed sends the same requests; another seed does not', async () => {
    const run = async (seed) => {
      const from = mock.state.bodies.length;
      const r = await bench(['--url', mock.url, '--model', 'mock-chat', '--workload', 'chat', '--requests', '8',
        '--seed', String(seed), '--timeout', '2', '--input-tokens', '4-32', '--output-tokens', '2-4', '--no-metrics',
        '--quiet']);
      assert.ok(r.code === 0 || r.code === 1, r.stderr);
      return mock.state.bodies.slice(from).map((b) => JSON.stringify(b));
    };
    const a = await run(7);
    const b = await run(7);
    const c = await run(8);
    assert.equal(a.length, 8);
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, c);
  });

  test('chat-shared-prefix: turns resend their conversation; conversations share system prompts', async () => {
    const from = mock.state.bodies.length;
    const r = await bench(['--url', mock.url, '--model', 'mock-chat', '--workload', 'chat-shared-prefix',
      '--requests', '24', '--concurrency', '2', '--sessions', '4', '--turns', '3', '--system-prompts', '2',
      '--system-tokens', '64', '--input-tokens', '4-8', '--output-tokens', '2-4', '--timeout', '2', '--quiet']);
    assert.ok(r.code === 0, r.stderr);
    const bodies = mock.state.bodies.slice(from);
    assert.equal(bodies.length, 24);
    const systems = new Set(bodies.map((b) => b.messages[0].content));
    assert.equal(systems.size, 2);
    // Request i is turn floor(i / 4) % 3 of slot i % 4: 1 + 2 * turn + 1 messages.
    bodies.forEach((b, i) => assert.equal(b.messages.length, 2 + 2 * (Math.floor(i / 4) % 3), `request ${i}`));
    // Sent by two clients, requests may leave out of index order: match them by content.
    const byFirstUser = new Map();
    for (const b of bodies) {
      const key = b.messages[1].content;
      if (!byFirstUser.has(key)) byFirstUser.set(key, []);
      byFirstUser.get(key).push(b.messages);
    }
    assert.equal(byFirstUser.size, 8, 'eight conversations (4 slots x 2 rounds)');
    for (const turns of byFirstUser.values()) {
      turns.sort((x, y) => x.length - y.length);
      for (let t = 1; t < turns.length; t++)
        assert.deepEqual(turns[t].slice(0, turns[t - 1].length), turns[t - 1], 'a turn extends the last one');
    }
  });

  test('open loop: Poisson arrivals at a rate, the same count of requests', async () => {
    const dir = tempDir();
    const out = path.join(dir, 'open.json');
    const from = mock.state.n;
    const r = await bench(['--url', mock.url, '--model', 'mock-chat', '--workload', 'chat', '--load', 'open',
      '--rate', '40', '--requests', '30', '--timeout', '2', '--input-tokens', '4', '--output-tokens', '3', '--json', out,
      '--quiet']);
    assert.equal(r.code, 0, r.stderr);
    const p = readJson(out).points[0];
    assert.equal(p.mode, 'open');
    assert.equal(p.load, 40);
    assert.equal(p.requests, 30);
    assert.equal(mock.state.n - from, 30);
    assert.equal(readJson(out).config.arrival, 'poisson');
  });

  test('sweep: one level per value, a saturation point, the HTML report, --compare', async () => {
    const dir = tempDir();
    const [a, b, html] = ['a.json', 'b.json', 'report.html'].map((f) => path.join(dir, f));
    const args = ['--url', mock.url, '--model', 'mock-chat', '--workload', 'chat', '--requests', '12', '--timeout', '2',
      '--input-tokens', '4', '--output-tokens', '3', '--quiet'];
    let r = await bench([...args, '--sweep', '4,1,2', '--json', a, '--html', html]);
    assert.equal(r.code, 0, r.stderr);
    const report = readJson(a);
    assert.deepEqual(report.points.map((p) => p.load), [1, 2, 4], 'levels run in increasing order');
    assert.ok(report.saturation.index >= 0 && report.saturation.index < 3);
    assert.match(report.saturation.reason, /concurrency|reached/);
    assert.match(r.stdout, /sweep:/);
    assert.match(r.stdout, /saturation/);
    const page = fs.readFileSync(html, 'utf8');
    assert.ok(page.startsWith('<!DOCTYPE html>'));
    assert.equal((page.match(/<svg/g) ?? []).length, (page.match(/<\/svg>/g) ?? []).length);
    assert.ok((page.match(/<svg/g) ?? []).length >= 6, 'latency curves, throughput curve, percentile bars');
    assert.ok((page.match(/<polyline/g) ?? []).length >= 4);
    assert.doesNotMatch(page, /<script|src=|href=|@import/);
    r = await bench([...args, '--sweep', '1,2', '--json', b]);
    assert.equal(r.code, 0, r.stderr);
    const cmp = await runPrism(['bench', '--compare', a, b]);
    assert.equal(cmp.code, 0, cmp.stderr);
    assert.match(cmp.stdout, /concurrency 1:/);
    assert.match(cmp.stdout, /req\/s\s+\S+\s+\S+\s+x\d+\.\d\d/);
    assert.match(cmp.stdout, /only in a: concurrency 4/);
  });
});

// ---- embeddings and echo against prism serve ------------------------------------------------

describe('the four workloads and echo against prism serve (demo set)', () => {
  let server;
  before(async () => {
    server = await startServer({ config: null, args: ['--demo-dir', path.join(tempDir(), 'demo')] });
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  test('chat: streamed replies, TTFT/ITL/TPOT and prism\'s generate metrics', async () => {
    const out = path.join(tempDir(), 'chat.json');
    const r = await bench(['--url', server.url, '--workload', 'chat', '--requests', '12', '--concurrency', '3',
      '--input-tokens', '16-48', '--output-tokens', '8-16', '--ignore-eos', '--json', out, '--quiet']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const report = readJson(out);
    const p = report.points[0];
    assert.equal(report.config.workload.model, 'demo-chat');
    assert.equal(p.errors_total, 0, JSON.stringify(p.error_examples));
    assert.equal(p.ok, 12);
    assert.equal(p.latency_ms.ttft.count, 12);
    assert.ok(p.latency_ms.itl.count > 0);
    // --ignore-eos: every reply runs to its drawn length, and the server counted the same tokens.
    const generated = serverMetric(p, 'prism_generate_generation_tokens_total')?.delta;
    assert.equal(generated, p.totals.output_tokens, JSON.stringify(p.server.map((m) => m.name)));
    assert.ok(p.totals.output_tokens >= 12 * 8 && p.totals.output_tokens <= 12 * 16);
    assert.equal(serverMetric(p, 'prism_generate_time_to_first_token_seconds')?.count, 12);
  });

  test('chat-shared-prefix: shared system prompts and resent turns hit the prefix cache', async () => {
    const out = path.join(tempDir(), 'shared.json');
    const r = await bench(['--url', server.url, '--workload', 'chat-shared-prefix', '--requests', '16',
      '--concurrency', '2', '--sessions', '4', '--turns', '2', '--system-prompts', '2', '--system-tokens', '128',
      '--input-tokens', '8-16', '--output-tokens', '4-8', '--ignore-eos', '--json', out, '--quiet']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const p = readJson(out).points[0];
    assert.equal(p.errors_total, 0, JSON.stringify(p.error_examples));
    assert.equal(p.ok, 16);
    const hits = serverMetric(p, 'prism_prefix_cache_hit_tokens_total')?.delta;
    const queried = serverMetric(p, 'prism_prefix_cache_queried_tokens_total')?.delta;
    assert.ok(queried > 0 && hits > 0, `prefix cache: ${hits} of ${queried} prompt tokens`);
    // 16 requests over 2 system prompts of 128 tokens: all but the first use of each hit.
    assert.ok(hits >= 14 * 112, `prefix cache: ${hits} of ${queried} prompt tokens`);
  });

  test('embed-online: one short query per request, p99 and /metrics from prism', async () => {
    const out = path.join(tempDir(), 'online.json');
    const r = await bench(['--url', server.url, '--workload', 'embed-online', '--requests', '30', '--concurrency', '2',
      '--json', out, '--quiet']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const p = readJson(out).points[0];
    assert.equal(readJson(out).config.workload.model, 'demo-embed');
    assert.equal(p.errors_total, 0, JSON.stringify(p.error_examples));
    assert.equal(p.totals.docs, 30);
    assert.ok(p.totals.input_tokens >= 30 * 3);
    assert.equal(p.latency_ms.e2e.count, 30);
    const requests = serverMetric(p, 'prism_requests_total');
    assert.equal(requests?.delta, 30, JSON.stringify(p.server.map((m) => m.name)));
    assert.equal(serverMetric(p, 'prism_queue_seconds')?.count, 30);
  });

  test('embed-bulk: many documents per request with a length mix, docs/s', async () => {
    const out = path.join(tempDir(), 'bulk.json');
    const r = await bench(['--url', server.url, '--workload', 'embed-bulk', '--requests', '4', '--concurrency', '2',
      '--docs-per-request', '16', '--doc-tokens', '8-24@90,48@10', '--json', out]);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const report = readJson(out);
    const p = report.points[0];
    assert.equal(report.headline_unit, 'docs');
    assert.equal(p.errors_total, 0, JSON.stringify(p.error_examples));
    assert.equal(p.totals.docs, 64);
    assert.ok(p.throughput_per_s.docs > 0);
    assert.match(r.stdout, /docs\/s/);
    assert.equal(report.config.workload.doc_tokens, '8-24@90,48@10');
  });

  test('echo: the framework alone, with prism\'s own server metrics', async () => {
    const out = path.join(tempDir(), 'echo.json');
    const r = await bench(['--url', server.url, '--workload', 'echo', '--requests', '50', '--concurrency', '4',
      '--json', out, '--quiet']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const p = readJson(out).points[0];
    assert.equal(p.errors_total, 0, JSON.stringify(p.error_examples));
    assert.equal(p.ok, 50);
    assert.equal(serverMetric(p, 'prism_requests_total')?.delta, 50);
    assert.ok(serverMetric(p, 'prism_batch_size')?.count > 0);
  });

  test('a warm-up is sent, not measured, and left out of the server figures', async () => {
    const out = path.join(tempDir(), 'warm.json');
    const r = await bench(['--url', server.url, '--workload', 'echo', '--duration', '1', '--warmup', '0.5',
      '--concurrency', '2', '--json', out, '--quiet']);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    const p = readJson(out).points[0];
    assert.ok(p.warmup_requests > 0 && p.requests > 0, JSON.stringify(p));
    // "before" is read when the warm-up ends: at most the two warm-up requests then in flight
    // end inside the measured figures.
    const delta = serverMetric(p, 'prism_requests_total')?.delta;
    assert.ok(delta <= p.requests + 2 && delta >= p.requests / 2, `server counted ${delta}, measured ${p.requests}`);
  });
});

// ---- bad usage and dead servers -------------------------------------------------------------

test('bad usage is refused with a message (exit 2)', async () => {
  const cases = [
    [['--url', 'http://127.0.0.1:1', '--workload', 'dance'], /unknown workload 'dance' \(workloads: embed-online/],
    [['--url', 'http://127.0.0.1:1'], /--workload is required/],
    [['--workload', 'chat', '--rate', '5', '--concurrency', '2'], /--concurrency is for --load closed/],
    [['--workload', 'chat', '--input-tokens', '0'], /--input-tokens '0': lengths must be in/],
    [['--workload', 'chat', '--url', 'https://x'], /https is not supported/],
    [['--workload', 'chat', '--extra-body', '[1]'], /--extra-body must be a JSON object/],
    [['--workload', 'chat', '--duration', '5', '--requests', '3'], /not both/],
    [['--workload', 'chat', '--sweep', '0,2'], /a concurrency must be an integer in \[1, 65536\]/],
    [['--workload', 'chat', '--load', 'open', '--sweep', '5,-1'], /a rate must be in/],
  ];
  for (const [args, message] of cases) {
    const r = await bench(args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  // Flags CLI11 itself cannot convert stop with its own message and exit code.
  const r = await bench(['--workload', 'chat', '--sweep', '1,x']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /--sweep/);
});

test('a server that is not there: every request is a connect error, promptly (exit 1)', async () => {
  const port = await new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); });
  });
  const out = path.join(tempDir(), 'dead.json');
  const r = await bench(['--url', `http://127.0.0.1:${port}`, '--model', 'x', '--workload', 'embed-online',
    '--requests', '5', '--json', out, '--quiet']);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /no request succeeded/);
  const p = readJson(out).points[0];
  assert.equal(p.errors.connect, 5);
  assert.match(p.server_note, /no server metrics/);
  // Without --model, the model list is needed: a clear error.
  const list = await bench(['--url', `http://127.0.0.1:${port}`, '--workload', 'chat', '--requests', '1']);
  assert.equal(list.code, 1);
  assert.match(list.stderr, /\/v1\/models failed: connect.*pass --model/);
});

test('--compare refuses files that are not reports (exit 1)', async () => {
  const dir = tempDir();
  const notJson = path.join(dir, 'x.json');
  fs.writeFileSync(notJson, '{"hello": 1}');
  let r = await runPrism(['bench', '--compare', notJson, notJson]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /not a prism bench report/);
  r = await runPrism(['bench', '--compare', path.join(dir, 'missing.json'), notJson]);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /missing\.json/);
});
