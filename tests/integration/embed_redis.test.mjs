// `prism embed-queue`: a bulk embedding job split across worker processes through Redis
// Streams (a throwaway redis-server on loopback). Three workers share 5,000 documents; one is
// killed (kill -9) holding a batch, another is frozen holding one until the job is done and
// then woken: collect still finds exactly one vector per document, in input order, equal to
// what `prism embed` computes in one process. Plus the refusals: another embedding space,
// an unfinished job, changed push options, bad addresses and names.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { PRISM_BIN, runPrism, tempDir } from './lib/server.mjs';
import { startRedis, redisCommand } from './lib/redis.mjs';

const NUM_DOCS = 5000;
const WORDS = ('the quick brown fox jumps over a lazy dog while seven wizards quietly hex every jolly ' +
  'sphinx of black quartz judge my vow and pack my box with five dozen liquor jugs today').split(' ');

let redis;
let modelDir;

before(async () => {
  redis = await startRedis();
  const demo = tempDir();
  const r = await runPrism(['demo', 'init', demo], { timeoutMs: 120000 });
  assert.equal(r.code, 0, r.stderr);
  modelDir = path.join(demo, 'demo-embed');
  assert.ok(fs.existsSync(path.join(modelDir, 'config.json')), `no demo-embed model in ${demo}`);
});

after(async () => {
  await redis?.stop();
});

// Documents of 1 to 40 words, deterministic.
function writeDocs(file, n, { id = (i) => `doc-${i}` } = {}) {
  let seed = 12345;
  const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);
  const lines = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rand() * 40);
    const words = [];
    for (let w = 0; w < len; w++) words.push(WORDS[Math.floor(rand() * WORDS.length)]);
    lines.push(JSON.stringify({ id: id(i), text: words.join(' ') }));
  }
  fs.writeFileSync(file, lines.join('\n') + '\n');
}

const queue = (sub, job, ...args) => ['embed-queue', sub, '--redis', redis.address, '--job', job, ...args];

async function status(job) {
  const r = await runPrism(queue('status', job));
  assert.equal(r.code, 0, r.stderr);
  return JSON.parse(r.stdout);
}

// A long-running prism process: {proc, exited (→ code or signal), output()}.
function startPrism(args) {
  const proc = spawn(PRISM_BIN, args, { env: { ...process.env, PRISM_THREADS: '1' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? signal)));
  return { proc, exited, output: () => out };
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(what, fn, timeoutMs = 120000) {
  const t0 = Date.now();
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

// Straight from Redis (no process to start, so the polling below is quick): the documents
// done, and those pending with each consumer (XPENDING's summary), per the documented layout.
async function peek(job) {
  const prefix = `prism:queue:{${job}}:`;
  const done = await redisCommand(redis.address, 'HLEN', prefix + 'results');
  const [, , , consumers] = await redisCommand(redis.address, 'XPENDING', prefix + 'items', 'workers');
  return { done, pending: Object.fromEntries((consumers ?? []).map(([name, n]) => [name, Number(n)])) };
}

// Freezes a worker (SIGSTOP) at a moment it holds a claimed batch; returns how many items.
async function freezeHoldingABatch(worker, consumer) {
  for (let attempt = 0; attempt < 500; attempt++) {
    worker.proc.kill('SIGSTOP');
    const held = (await peek(JOB)).pending[consumer] ?? 0;
    if (held > 0) return held;
    worker.proc.kill('SIGCONT');
    await sleep(5 + (attempt % 7));
  }
  throw new Error(`worker ${consumer} was never caught holding a batch:\n${worker.output()}`);
}

function readNpy(file) {
  const b = fs.readFileSync(file);
  assert.equal(b.subarray(1, 6).toString('latin1'), 'NUMPY');
  const headerLen = b[6] === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = (b[6] === 1 ? 10 : 12) + headerLen;
  const header = b.subarray(start - headerLen, start).toString('latin1');
  assert.match(header, /'descr': '<f4'/);
  const [rows, cols] = /'shape': \((\d+), (\d+)\)/.exec(header).slice(1).map(Number);
  const copy = new Uint8Array(rows * cols * 4);
  copy.set(b.subarray(start, start + rows * cols * 4));
  return { rows, cols, data: new Float32Array(copy.buffer) };
}

const readIds = (dir) => fs.readFileSync(path.join(dir, 'ids.jsonl'), 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));

const JOB = 'crash-test';

test('workers share a job; one killed and one stalled mid-job: exactly one vector per document', async (t) => {
  const dir = tempDir();
  const docs = path.join(dir, 'docs.jsonl');
  writeDocs(docs, NUM_DOCS);

  let r = await runPrism(queue('push', JOB, '--input', docs, '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  let s = await status(JOB);
  assert.equal(s.total, NUM_DOCS);
  assert.equal(s.closed, true);
  // Pushing again adds nothing.
  r = await runPrism(queue('push', JOB, '--input', docs, '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /holds 5,000 documents \(0 added by this run\)/);
  assert.equal((await status(JOB)).total, NUM_DOCS);

  const workerArgs = (name) => queue('work', JOB, '--model', modelDir, '--consumer', name, '--batch', '8',
    '--min-idle-ms', '500', '--no-progress');
  const workers = ['w0', 'w1', 'w2'].map((name) => ({ name, ...startPrism(workerArgs(name)) }));
  const [survivor, victim, staller] = workers;
  try {
    await waitFor('the workers to get going', async () => (await peek(JOB)).done >= 300);

    // w1 dies holding a batch; w2 freezes holding one (a stalled machine) until the end.
    const killedHeld = await freezeHoldingABatch(victim, 'w1');
    victim.proc.kill('SIGKILL');
    assert.equal(await victim.exited, 'SIGKILL');
    const stalledHeld = await freezeHoldingABatch(staller, 'w2');
    const { done } = await peek(JOB);
    assert.ok(done < NUM_DOCS, `the job finished before the crash (${done} done): make it longer`);
    t.diagnostic(`w1 killed holding ${killedHeld} documents, w2 frozen holding ${stalledHeld}, ${done} done`);

    // The survivor takes both batches over and finishes the job.
    assert.equal(await survivor.exited, 0, survivor.output());
    s = await status(JOB);
    assert.equal(s.finished, true);
    assert.equal(s.done, NUM_DOCS);
    assert.equal(s.pending, 0);
    const taken = Number(/([\d,]+) taken over/.exec(survivor.output())[1].replace(/,/g, ''));
    assert.ok(taken >= killedHeld + stalledHeld, `survivor took over ${taken}, dead and stalled held ${killedHeld} + ${stalledHeld}`);

    // The stalled worker wakes, completes its batch (already done: not stored again) and stops.
    staller.proc.kill('SIGCONT');
    assert.equal(await staller.exited, 0, staller.output());
    const late = Number(/([\d,]+) done by another first/.exec(staller.output())[1].replace(/,/g, ''));
    assert.ok(late >= stalledHeld, staller.output());
    assert.equal((await status(JOB)).done, NUM_DOCS);
    for (const w of [survivor, staller]) t.diagnostic(/consumer \S+ embedded .*/.exec(w.output())[0]);
  } finally {
    for (const w of workers) {
      if (w.proc.exitCode === null && w.proc.signalCode === null) {
        w.proc.kill('SIGCONT');
        w.proc.kill('SIGKILL');
      }
    }
  }

  const out = path.join(dir, 'out');
  r = await runPrism(queue('collect', JOB, '--output', out));
  assert.equal(r.code, 0, r.stderr);
  const ids = readIds(out);
  assert.equal(ids.length, NUM_DOCS);
  assert.equal(new Set(ids).size, NUM_DOCS, 'no duplicate id');
  ids.forEach((id, i) => assert.equal(id, `doc-${i}`));
  const got = readNpy(path.join(out, 'vectors.npy'));
  assert.equal(got.rows, NUM_DOCS);
  const meta = JSON.parse(fs.readFileSync(path.join(out, 'metadata.json'), 'utf8'));
  assert.equal(meta.dims, got.cols);

  // The same documents embedded in one process.
  const single = path.join(dir, 'single');
  r = await runPrism(['embed', '--model', modelDir, '--input', docs, '--output', single, '--no-progress'], { timeoutMs: 120000 });
  assert.equal(r.code, 0, r.stderr);
  const want = readNpy(path.join(single, 'vectors.npy'));
  assert.deepEqual(readIds(single), ids);
  assert.equal(want.cols, got.cols);
  let worst = 0;
  for (let i = 0; i < want.data.length; i++) worst = Math.max(worst, Math.abs(want.data[i] - got.data[i]));
  // Batches differ between the runs, so the last bits may (the vectors are unit length).
  assert.ok(worst <= 1e-5, `max |queue - single| = ${worst}`);
  t.diagnostic(`max |queue - single| = ${worst}`);
  const singleMeta = JSON.parse(fs.readFileSync(path.join(single, 'metadata.json'), 'utf8'));
  assert.equal(meta.space_id, singleMeta.space_id);

  // Collecting again into the same folder: only with --resume, and it adds nothing.
  r = await runPrism(queue('collect', JOB, '--output', out));
  assert.equal(r.code, 1);
  r = await runPrism(queue('collect', JOB, '--output', out, '--resume'));
  assert.equal(r.code, 0, r.stderr);
  assert.equal(readIds(out).length, NUM_DOCS);
});

test('a worker in another embedding space, at other dims or precision is refused', async () => {
  const dir = tempDir();
  const docs = path.join(dir, 'docs.jsonl');
  writeDocs(docs, 20);
  const job = 'space-check';
  let r = await runPrism(queue('push', job, '--input', docs, '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  r = await runPrism(queue('work', job, '--model', modelDir, '--no-progress'));
  assert.equal(r.code, 0, r.stderr);

  // The same weights under another config are another space.
  const other = path.join(dir, 'other-model');
  fs.cpSync(modelDir, other, { recursive: true });
  const config = JSON.parse(fs.readFileSync(path.join(other, 'config.json'), 'utf8'));
  config.layer_norm_eps = config.layer_norm_eps * 2;
  fs.writeFileSync(path.join(other, 'config.json'), JSON.stringify(config));
  r = await runPrism(queue('work', job, '--model', other, '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /job space-check is made in another embedding space .*: refused/);

  r = await runPrism(queue('work', job, '--model', modelDir, '--dimensions', '8', '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /-dim vectors .*this worker would write 8: refused/);
  r = await runPrism(queue('work', job, '--model', modelDir, '--precision', 'bf16', '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /is embedded at f32 .*this worker runs bf16: refused/);
});

test('collect refuses an unfinished job; push refuses changed options, empty documents and no documents', async () => {
  const dir = tempDir();
  const docs = path.join(dir, 'docs.jsonl');
  writeDocs(docs, 30);
  const job = 'unfinished';
  let r = await runPrism(queue('push', job, '--input', docs, '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  r = await runPrism(queue('collect', job, '--output', path.join(dir, 'out')));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /job unfinished is not finished: 30 of 30 documents have no vector yet/);
  assert.ok(!fs.existsSync(path.join(dir, 'out', 'vectors.npy')));

  r = await runPrism(queue('push', job, '--input', docs, '--text-field', 'body', '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /was pushed with other input options/);

  const bigger = path.join(dir, 'bigger.jsonl');
  writeDocs(bigger, 31);
  r = await runPrism(queue('push', job, '--input', bigger, '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /pushed complete with 30 documents, but the input holds more/);

  const empty = path.join(dir, 'empty.txt');
  fs.writeFileSync(empty, 'one\n   \nthree\n');
  r = await runPrism(queue('push', 'has-empty', '--input', empty, '--no-progress'));
  assert.equal(r.code, 1);
  assert.ok(r.stderr.includes(`${empty}:2: document '1' is empty (pass --skip-empty`), r.stderr);
  r = await runPrism(queue('push', 'skips-empty', '--input', empty, '--skip-empty', '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /holds 2 documents .*1 empty skipped/);

  const none = path.join(dir, 'none.jsonl');
  fs.writeFileSync(none, '');
  r = await runPrism(queue('push', 'no-docs', '--input', none, '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /holds no documents/);
});

test('a document too long for the model stops a worker unless --truncate', async () => {
  const dir = tempDir();
  const docs = path.join(dir, 'docs.txt');
  fs.writeFileSync(docs, `short one\n${'word '.repeat(5000)}\nshort two\n`);
  const job = 'too-long';
  let r = await runPrism(queue('push', job, '--input', docs, '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  r = await runPrism(queue('work', job, '--model', modelDir, '--consumer', 'strict', '--no-progress'));
  assert.equal(r.code, 1);
  assert.match(r.stderr, /document 1 \('1'\) has \d+ tokens, more than this model's maximum of \d+/);
  // Its batch stays pending; a worker with --truncate takes it over once idle and finishes.
  r = await runPrism(queue('work', job, '--model', modelDir, '--truncate', '--min-idle-ms', '100', '--no-progress'));
  assert.equal(r.code, 0, r.stderr);
  const s = await status(job);
  assert.equal(s.done, 3);
  assert.equal(s.finished, true);
});

test('bad addresses and job names are clear errors', async () => {
  let r = await runPrism(['embed-queue', 'status', '--redis', 'nowhere:', '--job', 'j']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /redis address 'nowhere:': empty port \(expected HOST:PORT\)/);
  r = await runPrism(['embed-queue', 'status', '--redis', redis.address, '--job', 'a b']);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /job name 'a b' may only hold letters, digits/);
  // A port nothing listens on: the redis server is stopped for good at the end, so use a
  // fresh one's port after stopping it.
  const gone = await startRedis();
  await gone.stop();
  r = await runPrism(['embed-queue', 'status', '--redis', gone.address, '--job', 'j']);
  assert.equal(r.code, 1);
  assert.ok(r.stderr.includes(`cannot connect to redis at ${gone.address}`), r.stderr);
});
