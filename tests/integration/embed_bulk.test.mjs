// `prism embed` bulk jobs and search, end to end on a tiny random MiniLM-layout checkpoint
// (tests/reference/bert_family.py): kill -9 at three points then --resume gives exactly the
// uninterrupted run's ids and vectors; peak memory stays flat from 20k to 1M documents; bad
// input stops the job naming FILE:LINE and --resume continues after the fix; folders of
// another embedding space are refused; `prism search` and POST /v1/prism/search find a
// document from its own text.
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { PRISM_BIN, runPrism, startServer, tempDir, curl, json, openaiError } from './lib/server.mjs';

const PYTHON = process.env.PRISM_PYTHON || '/usr/bin/python3';
const REFERENCE = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../reference/bert_family.py');
const RSS_BOUND_MIB = 128;  // measured: 37 MiB for 20k, 40 MiB for 1M documents

// A tiny model (hidden 32, 1 layer): 1M short documents take about 6 s on one idle core.
function makeModel(dir, seed) {
  execFileSync(PYTHON, [REFERENCE, '--layout', 'minilm', '--out', dir, '--no-reference', '--seed', String(seed),
    '--hidden', '32', '--layers', '1', '--heads', '2', '--intermediate', '64'], { stdio: 'pipe' });
  return dir;
}

const WORDS = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau'.split(' ');
// Deterministic, distinct texts of 5 to 25 tokens.
function docText(i) {
  let x = (i * 2654435761) >>> 0;
  const words = [];
  for (let k = 0; k < 3 + (i % 17); ++k) {
    x = (x * 1103515245 + 12345) >>> 0;
    words.push(WORDS[x % WORDS.length]);
  }
  return `document ${i}: ${words.join(' ')}`;
}

function writeJsonl(file, n) {
  const lines = [];
  for (let i = 0; i < n; ++i) lines.push(JSON.stringify({ id: `doc-${i}`, text: docText(i) }));
  fs.writeFileSync(file, lines.join('\n') + '\n');
  return file;
}

// vectors.npy → {rows, cols, data: Float32Array}.
function readNpy(file) {
  const b = fs.readFileSync(file);
  assert.equal(b.toString('latin1', 0, 6), '\x93NUMPY');
  const headerLen = b.readUInt16LE(8);
  const header = b.toString('latin1', 10, 10 + headerLen);
  const m = /'shape': \((\d+), (\d+)\)/.exec(header);
  assert.ok(m, header);
  const rows = Number(m[1]);
  const cols = Number(m[2]);
  const offset = 10 + headerLen;
  assert.equal(b.length, offset + rows * cols * 4, 'file size matches the header');
  const data = new Float32Array(b.buffer.slice(b.byteOffset + offset, b.byteOffset + b.length));
  return { rows, cols, data };
}

function readIds(dir) {
  return fs.readFileSync(path.join(dir, 'ids.jsonl'), 'utf8').split('\n').filter((l) => l).map((l) => JSON.parse(l));
}

function checkpointDocs(dir) {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')).docs;
  } catch {
    return 0;  // not written yet
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts `prism embed ARGS --resume` and kill -9s it as soon as checkpoint.json shows at least
// `atDocs` committed documents. Returns the docs committed when it was killed.
async function embedAndKill(args, outDir, atDocs) {
  const proc = spawn(PRISM_BIN, ['embed', ...args, '--resume'], { env: { ...process.env, PRISM_THREADS: '1' }, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  let killed = false;
  const exitedEarly = exited.then(() => 'exited');
  for (;;) {
    const r = await Promise.race([exitedEarly, sleep(2)]);
    if (r === 'exited') break;
    if (checkpointDocs(outDir) >= atDocs) {
      proc.kill('SIGKILL');
      killed = true;
      break;
    }
  }
  const { code, signal } = await exited;
  assert.ok(killed, `prism embed ended (${code}) before committing ${atDocs} documents: ${stderr}`);
  assert.equal(signal, 'SIGKILL');
  return checkpointDocs(outDir);
}

let dir;
let model;
let otherModel;
before(() => {
  dir = tempDir();
  model = makeModel(path.join(dir, 'model'), 1);
  otherModel = makeModel(path.join(dir, 'model-2'), 2);
});

test('kill -9 at three points, then --resume: exactly the uninterrupted run, one vector per document', async () => {
  const n = 20000;
  const input = writeJsonl(path.join(dir, 'docs20k.jsonl'), n);
  const common = ['--model', model, '--input', input, '--no-progress', '--batch-tokens', '512', '--checkpoint-every', '200'];
  const refDir = path.join(dir, 'ref');
  const ref = await runPrism(['embed', ...common, '--output', refDir], { timeoutMs: 120000 });
  assert.equal(ref.code, 0, ref.stderr);

  const out = path.join(dir, 'killed');
  const args = [...common, '--output', out];
  const points = [];
  for (const at of [1500, 7000, 14000]) points.push(await embedAndKill(args, out, at));
  assert.ok(points[0] < points[1] && points[1] < points[2] && points[2] < n, `kill points ${points}`);
  const last = await runPrism(['embed', ...args, '--resume'], { timeoutMs: 120000 });
  assert.equal(last.code, 0, last.stderr);
  assert.match(last.stderr, new RegExp(`resuming after ${points[2].toLocaleString('en-US')} documents`));

  const ids = readIds(out);
  assert.equal(ids.length, n, 'one id per document');
  assert.equal(new Set(ids).size, n, 'no duplicate');
  assert.deepEqual(ids, readIds(refDir), 'ids in input order');
  const a = readNpy(path.join(out, 'vectors.npy'));
  const b = readNpy(path.join(refDir, 'vectors.npy'));
  assert.equal(a.rows, n);
  assert.equal(a.cols, 32);
  let maxDiff = 0;
  for (let i = 0; i < a.data.length; ++i) maxDiff = Math.max(maxDiff, Math.abs(a.data[i] - b.data[i]));
  // Batches re-form identically after a checkpoint (same token budget from the same offset).
  assert.ok(maxDiff <= 1e-6, `max |resumed - uninterrupted| = ${maxDiff}`);
  const ckpt = JSON.parse(fs.readFileSync(path.join(out, 'checkpoint.json'), 'utf8'));
  assert.equal(ckpt.docs, n);
  const meta = JSON.parse(fs.readFileSync(path.join(out, 'metadata.json'), 'utf8'));
  assert.equal(meta.docs, n);
  assert.equal(meta.dims, 32);
  assert.equal(meta.normalized, true);
  assert.equal(meta.precision, 'f32');
});

test(`peak RSS is flat from 20k to 1M documents and under ${RSS_BOUND_MIB} MiB`, async () => {
  const peak = async (n) => {
    const input = path.join(dir, `short${n}.txt`);
    const fd = fs.openSync(input, 'w');
    for (let i = 0; i < n; i += 10000) {
      const lines = [];
      for (let j = i; j < Math.min(n, i + 10000); ++j) lines.push(docText(j));
      fs.writeSync(fd, lines.join('\n') + '\n');
    }
    fs.closeSync(fd);
    const r = await runPrism(['embed', '--model', model, '--input', input, '--output', path.join(dir, `rss${n}`), '--no-progress'],
      { timeoutMs: 280000 });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, new RegExp(`${n.toLocaleString('en-US')} documents in`));
    const m = /peak RSS (\d+) MiB/.exec(r.stderr);
    assert.ok(m, r.stderr);
    fs.rmSync(input);
    fs.rmSync(path.join(dir, `rss${n}`), { recursive: true });
    return Number(m[1]);
  };
  const small = await peak(20000);
  const large = await peak(1000000);
  assert.ok(large < RSS_BOUND_MIB, `peak RSS ${large} MiB for 1M documents`);
  assert.ok(large <= small + 16, `peak RSS grows with the input: ${small} MiB for 20k, ${large} MiB for 1M`);
});

test('bad input stops the job naming FILE:LINE; --resume continues after the fix', async () => {
  const input = path.join(dir, 'bad.jsonl');
  const good = (i) => JSON.stringify({ id: `d${i}`, text: docText(i) });
  const lines = [good(0), good(1), good(2), '{"id": "d3", "text": "broken', good(4)];
  fs.writeFileSync(input, lines.join('\n') + '\n');
  const out = path.join(dir, 'bad-out');
  const args = ['embed', '--model', model, '--input', input, '--output', out, '--no-progress'];
  const r = await runPrism(args);
  assert.equal(r.code, 1);
  assert.ok(r.stderr.includes(`${input}:4: invalid JSON`), r.stderr);
  assert.match(r.stderr, /3 documents are committed/);
  assert.equal(checkpointDocs(out), 3);

  lines[3] = good(3);
  fs.writeFileSync(input, lines.join('\n') + '\n');  // same bytes before line 4: the job resumes
  const again = await runPrism(args);
  assert.equal(again.code, 1, 'a non-empty folder needs --resume');
  assert.match(again.stderr, /pass --resume/);
  const fixed = await runPrism([...args, '--resume']);
  assert.equal(fixed.code, 0, fixed.stderr);
  assert.deepEqual(readIds(out), ['d0', 'd1', 'd2', 'd3', 'd4']);

  // Another model's space, with or without --resume.
  for (const extra of [[], ['--resume']]) {
    const other = await runPrism(['embed', '--model', otherModel, '--input', input, '--output', out, '--no-progress', ...extra]);
    assert.equal(other.code, 1);
    assert.match(other.stderr, /made in another embedding space/);
  }
  // A different input cannot resume the job.
  const shuffled = path.join(dir, 'other.jsonl');
  fs.writeFileSync(shuffled, [good(9), good(8), good(7), good(6), good(5), good(10)].join('\n') + '\n');
  const wrong = await runPrism(['embed', '--model', model, '--input', shuffled, '--output', out, '--no-progress', '--resume']);
  assert.equal(wrong.code, 1);
  assert.match(wrong.stderr, /is not the input this job started with/);
});

test('empty documents are errors unless --skip-empty; .txt and .csv inputs', async () => {
  const txt = path.join(dir, 'empty.txt');
  fs.writeFileSync(txt, 'first line\n   \nthird line\n');
  const strict = await runPrism(['embed', '--model', model, '--input', txt, '--output', path.join(dir, 'e1'), '--no-progress']);
  assert.equal(strict.code, 1);
  assert.ok(strict.stderr.includes(`${txt}:2: document '1' is empty`), strict.stderr);
  const skip = await runPrism(['embed', '--model', model, '--input', txt, '--output', path.join(dir, 'e2'), '--no-progress', '--skip-empty']);
  assert.equal(skip.code, 0, skip.stderr);
  assert.match(skip.stderr, /1 empty skipped/);
  assert.deepEqual(readIds(path.join(dir, 'e2')), ['0', '2'], '.txt ids are 0-based line numbers');

  // Longer than the model's 64 positions: an error naming the line, or cut with --truncate.
  const long = path.join(dir, 'long.txt');
  fs.writeFileSync(long, `short one\n${'word '.repeat(100)}\n`);
  const tooLong = await runPrism(['embed', '--model', model, '--input', long, '--output', path.join(dir, 'l1'), '--no-progress']);
  assert.equal(tooLong.code, 1);
  assert.ok(tooLong.stderr.includes(`${long}:2: document '1' has 102 tokens, more than this model's maximum of 64`), tooLong.stderr);
  const cut = await runPrism(['embed', '--model', model, '--input', long, '--output', path.join(dir, 'l2'), '--no-progress', '--truncate']);
  assert.equal(cut.code, 0, cut.stderr);
  assert.equal(readIds(path.join(dir, 'l2')).length, 2);

  const csv = path.join(dir, 'docs.csv');
  fs.writeFileSync(csv, 'key,body\r\nk1,"one, with comma"\r\nk2,"two\r\nlines"\r\nk3,"say ""hi"""\r\n');
  const c = await runPrism(['embed', '--model', model, '--input', csv, '--output', path.join(dir, 'c1'), '--no-progress',
    '--text-field', 'body', '--id-field', 'key']);
  assert.equal(c.code, 0, c.stderr);
  assert.deepEqual(readIds(path.join(dir, 'c1')), ['k1', 'k2', 'k3']);
  assert.equal(readNpy(path.join(dir, 'c1', 'vectors.npy')).rows, 3);
});

test('prism search and POST /v1/prism/search find a document from its own text', async () => {
  const n = 2000;
  const input = writeJsonl(path.join(dir, 'docs2k.jsonl'), n);
  const out = path.join(dir, 'indexed');
  const r = await runPrism(['embed', '--model', model, '--input', input, '--output', out, '--no-progress', '--faiss']);
  assert.equal(r.code, 0, r.stderr);
  assert.ok(fs.existsSync(path.join(out, 'index.faiss')));

  const s = await runPrism(['search', '--index', out, '--model', model, '--query', docText(123), '--query', docText(1999), '-k', '3', '--json']);
  assert.equal(s.code, 0, s.stderr);
  const results = s.stdout.trim().split('\n').map((l) => JSON.parse(l));
  assert.equal(results.length, 2);
  assert.equal(results[0].results.length, 3);
  assert.equal(results[0].results[0].id, 'doc-123');
  assert.ok(Math.abs(results[0].results[0].score - 1) < 1e-4, JSON.stringify(results[0]));
  assert.equal(results[1].results[0].id, 'doc-1999');
  const plain = await runPrism(['search', '--index', out, '--model', model, '--query', docText(7), '-k', '1']);
  assert.equal(plain.code, 0, plain.stderr);
  assert.match(plain.stdout, /^doc-7\t(1\.000000|0\.99999\d)\n$/);
  const mismatch = await runPrism(['search', '--index', out, '--model', otherModel, '--query', 'x']);
  assert.equal(mismatch.code, 1);
  assert.match(mismatch.stderr, /not comparable/);

  const config = `
[[deployment]]
name = "mini"
task = "embed"
model = "${model}"
[deployment.knobs]
search_index = "${out}"

[[deployment]]
name = "plain"
task = "embed"
model = "${model}"
`;
  const server = await startServer({ config });
  try {
    const post = (body) => curl(['-X', 'POST', `${server.url}/v1/prism/search`, '-H', 'content-type: application/json', '-d', JSON.stringify(body)]);
    const ok = await post({ model: 'mini', query: [docText(42), docText(1500)], top_k: 2 });
    assert.equal(ok.status, 200, ok.body);
    const body = json(ok.body);
    assert.equal(body.object, 'list');
    assert.equal(body.data.length, 2);
    assert.equal(body.data[0].query_index, 0);
    assert.equal(body.data[0].results.length, 2);
    assert.equal(body.data[0].results[0].id, 'doc-42');
    assert.ok(Math.abs(body.data[0].results[0].score - 1) < 1e-4);
    assert.equal(body.data[1].results[0].id, 'doc-1500');
    assert.equal(body.prism.metric, 'inner_product');
    assert.equal(body.prism.index_size, n);
    assert.ok(body.usage.prompt_tokens > 0);
    assert.equal(ok.headers['x-prism-embedding-space'], body.prism.embedding_space);

    const one = await post({ model: 'mini', query: docText(5) });
    assert.equal(one.status, 200, one.body);
    assert.equal(json(one.body).data[0].results[0].id, 'doc-5');
    assert.equal(json(one.body).data[0].results.length, 10, 'top_k defaults to 10');

    const noIndex = await post({ model: 'plain', query: 'x' });
    assert.equal(noIndex.status, 400);
    assert.equal(openaiError(noIndex.body).param, 'model');
    assert.match(openaiError(noIndex.body).message, /search_index/);
    assert.equal((await post({ model: 'nope', query: 'x' })).status, 404);
    const missing = await post({ model: 'mini' });
    assert.equal(missing.status, 400);
    assert.equal(openaiError(missing.body).param, 'query');
    assert.equal((await post({ model: 'mini', query: 'x', top_k: 0 })).status, 400);
    assert.equal(openaiError((await post({ model: 'mini', query: '' })).body).param, 'query');
  } finally {
    await server.stop();
  }

  // A folder that is not an index stops start-up naming the knob.
  const broken = await runPrism(['serve', '--port', '0', '--config', (() => {
    const f = path.join(tempDir(), 'prism.toml');
    fs.writeFileSync(f, `[[deployment]]\nname = "m"\ntask = "embed"\nmodel = "${model}"\n[deployment.knobs]\nsearch_index = "${dir}"\n`);
    return f;
  })()]);
  assert.equal(broken.code, 1);
  assert.match(broken.stderr, /knob 'search_index'.*not an embedding folder/);
});
