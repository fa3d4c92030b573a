// POST /v1/embeddings through the official `openai` client (client.embeddings.create), on the
// demo set's "demo-embed" and on a tiny checkpoint of every BERT-family layout written by
// tests/reference/bert_family.py: the four input forms, float and base64 (the SDK asks for
// base64 and decodes it when encoding_format is left out), Matryoshka dimensions, usage, the
// `prism` field and X-Prism-Embedding-Space header, truncation, and errors naming the input.
// Layout vectors must match the PyTorch reference within the parity bound (1e-4).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { runPrism, startServer, tempDir } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';
import {
  LAYOUTS, generateLayout, readReference, tokenize, norm, maxRelError, decodeBase64Floats,
} from './lib/embeddings.mjs';

const { default: OpenAI } = await importDep('openai');

const PARITY = 1e-4;  // fp32 max relative error against the float64 reference
const TEXT = 'The quick brown fox jumps over the lazy dog.';

function clientOf(server) {
  return new OpenAI({ apiKey: 'sk-unused', baseURL: server.url + '/v1', maxRetries: 0, timeout: 60000 });
}

// Raw POST /v1/embeddings: {status, headers, body (parsed)}.
async function post(server, body) {
  const r = await fetch(server.url + '/v1/embeddings', {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, headers: r.headers, text, body: JSON.parse(text) };
}

// The client call fails with a 400 (BadRequestError) whose param and message are as given.
async function rejects400(promise, param, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, param, e.message);
    assert.match(e.message, message);
    return true;
  });
}

function assertUnit(v, what) {
  assert.ok(Math.abs(norm(v) - 1) < 1e-5, `${what}: norm ${norm(v)}`);
}

// Layout checkpoints are written while the demo tests run (python + torch take seconds).
const layoutRoot = tempDir();
const layoutsReady = Promise.all(LAYOUTS.map((l) => generateLayout(l, path.join(layoutRoot, l))));
layoutsReady.catch(() => {});  // reported by the layout tests' before()

describe('the demo set', () => {
  const demoDir = tempDir();
  const modelDir = path.join(demoDir, 'demo-embed');
  let server;
  let client;
  let ids;    // TEXT's token ids
  let alone;  // TEXT's vector
  before(async () => {
    server = await startServer({ config: null, args: ['--demo-dir', demoDir] });
    client = clientOf(server);
    ids = await tokenize(modelDir, TEXT);
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  test('one string, as the SDK asks by default (base64, decoded by the SDK)', async () => {
    const r = await client.embeddings.create({ model: 'demo-embed', input: TEXT });
    assert.equal(r.object, 'list');
    assert.equal(r.model, 'demo-embed');
    assert.equal(r.data.length, 1);
    assert.equal(r.data[0].object, 'embedding');
    assert.equal(r.data[0].index, 0);
    alone = r.data[0].embedding;
    assert.ok(Array.isArray(alone));
    assert.equal(alone.length, 128);
    assert.ok(alone.every(Number.isFinite));
    assertUnit(alone, 'demo-embed vector');
    assert.deepEqual(r.usage, { prompt_tokens: ids.length, total_tokens: ids.length });
    assert.ok(ids.length > 3 && ids[0] === 2 && ids.at(-1) === 3, `[CLS] ... [SEP]: ${ids}`);
    assert.equal(r.prism.dims, 128);
    assert.equal(r.prism.normalized, true);
    assert.match(r.prism.embedding_space, /^[0-9a-f]{16,}$/);
  });

  test('encoding_format float and base64 carry the same float32 values', async () => {
    const f = await client.embeddings.create({ model: 'demo-embed', input: TEXT, encoding_format: 'float' });
    assert.deepEqual(f.data[0].embedding.map(Math.fround), alone);
    const b = await client.embeddings.create({ model: 'demo-embed', input: TEXT, encoding_format: 'base64' });
    assert.equal(typeof b.data[0].embedding, 'string');
    assert.deepEqual(decodeBase64Floats(b.data[0].embedding), alone);
    // Floats print as floats: at most 9 significant digits, never a double's 17.
    const raw = await post(server, { model: 'demo-embed', input: TEXT, encoding_format: 'float' });
    const numbers = /"embedding":\[([^\]]*)\]/.exec(raw.text)[1].split(',');
    assert.equal(numbers.length, 128);
    for (const n of numbers) {
      const digits = n.replace(/e.*$/i, '').replace(/[-.]/g, '').replace(/^0+/, '');
      assert.ok(digits.length <= 9, `${n} has ${digits.length} significant digits`);
    }
  });

  test('a batch: one vector per input, in order, each as it is alone', async () => {
    const texts = [TEXT, 'hello world', 'Embeddings turn text into vectors!', 'a'];
    const r = await client.embeddings.create({ model: 'demo-embed', input: texts });
    assert.equal(r.data.length, texts.length);
    let tokens = 0;
    for (let i = 0; i < texts.length; i++) {
      assert.equal(r.data[i].index, i);
      const one = await client.embeddings.create({ model: 'demo-embed', input: texts[i] });
      assert.ok(maxRelError(r.data[i].embedding, one.data[0].embedding) < 1e-5, `input ${i}`);
      tokens += one.usage.prompt_tokens;
    }
    assert.equal(r.usage.prompt_tokens, tokens);
  });

  test('token arrays, one and many, embed as the text they encode', async () => {
    const one = await client.embeddings.create({ model: 'demo-embed', input: ids });
    assert.equal(one.data.length, 1);
    assert.ok(maxRelError(one.data[0].embedding, alone) < 1e-6);
    assert.equal(one.usage.prompt_tokens, ids.length);
    const other = await tokenize(modelDir, 'hello world');
    const many = await client.embeddings.create({ model: 'demo-embed', input: [ids, other] });
    assert.equal(many.data.length, 2);
    assert.ok(maxRelError(many.data[0].embedding, alone) < 1e-5);
    assert.equal(many.usage.prompt_tokens, ids.length + other.length);
  });

  test('dimensions: truncated, then re-normalised', async () => {
    const r = await client.embeddings.create({ model: 'demo-embed', input: TEXT, dimensions: 32 });
    const v = r.data[0].embedding;
    assert.equal(v.length, 32);
    assertUnit(v, 'dimensions 32');
    const head = alone.slice(0, 32);
    const n = norm(head);
    assert.ok(maxRelError(v, head.map((x) => x / n)) < 1e-5);
    const raw = await post(server, { model: 'demo-embed', input: TEXT, dimensions: 32 });
    assert.equal(raw.body.prism.dims, 32);
    await rejects400(client.embeddings.create({ model: 'demo-embed', input: TEXT, dimensions: 129 }),
      'dimensions', /129.*128|128.*129/);
    await rejects400(client.embeddings.create({ model: 'demo-embed', input: TEXT, dimensions: 0 }),
      'dimensions', /between 1 and/);
  });

  test('the prism field and the X-Prism-Embedding-Space header name the space', async () => {
    const a = await post(server, { model: 'demo-embed', input: TEXT });
    assert.equal(a.status, 200);
    const space = a.headers.get('x-prism-embedding-space');
    assert.match(space ?? '', /^[0-9a-f]{16,}$/);
    assert.deepEqual(a.body.prism, { embedding_space: space, dims: 128, normalized: true });
    assert.ok(Array.isArray(a.body.data[0].embedding), 'the server\'s default encoding_format is float');
    const b = await post(server, { model: 'demo-embed', input: ['other', 'texts'], encoding_format: 'base64' });
    assert.equal(b.headers.get('x-prism-embedding-space'), space);
    const model = await client.models.retrieve('demo-embed');
    assert.equal(model.prism.task, 'embed');
    if ('embedding_space_id' in model.prism) assert.equal(model.prism.embedding_space_id, space);
  });

  test('empty, mixed and malformed inputs are 400s naming the element', async () => {
    const create = (input, extra = {}) =>
      client.embeddings.create({ model: 'demo-embed', input, encoding_format: 'float', ...extra });
    await rejects400(create(''), 'input', /input is an empty string/);
    await rejects400(create([]), 'input', /input is an empty array/);
    await rejects400(create(['a', 'b', 'c', '']), 'input', /input\[3\] is an empty string/);
    await rejects400(create([[5, 6], []]), 'input', /input\[1\] is an empty token array/);
    await rejects400(create(['a', 7]), 'input', /input\[1\] is an integer but input\[0\] is a string/);
    await rejects400(create([5, 2.5]), 'input', /input\[1\] is 2\.5, not an integer token id/);
    await rejects400(create([[5], [6, 'x']]), 'input', /input\[1\]\[1\] is a string, not an integer token id/);
    await rejects400(create([5, 1000000]), 'input', /1000000/);   // past the vocabulary
    await rejects400(create([[5], [-1]]), 'input', /input\[1\]/);
    await rejects400(create({ text: TEXT }), 'input', /input must be a string, an array of strings/);
    await rejects400(create(Array(2049).fill('x')), 'input', /2049 elements; at most 2048/);
    await rejects400(create(TEXT, { encoding_format: 'xml' }), 'encoding_format', /'xml' is not one of/);
    await rejects400(create(TEXT, { truncate: 'yes' }), 'truncate', /boolean/);
    await rejects400(create(TEXT, { priority: 'urgent' }), 'priority', /not one of/);
    const missing = await post(server, { model: 'demo-embed' });
    assert.equal(missing.status, 400);
    assert.equal(missing.body.error.code, 'missing_required_parameter');
    assert.equal(missing.body.error.param, 'input');
    // 2048 inputs is the limit, not past it.
    const full = await create(Array(2048).fill('x'));
    assert.equal(full.data.length, 2048);
  });

  test('too long: a 400 giving the numbers, unless truncate', async () => {
    const long = 'word '.repeat(600);
    const n = (await tokenize(modelDir, long)).length;
    assert.ok(n > 512);
    await rejects400(client.embeddings.create({ model: 'demo-embed', input: ['short', long], encoding_format: 'float' }),
      'input', new RegExp(`input\\[1\\].*${n}.*512`));
    const cut = await client.embeddings.create({ model: 'demo-embed', input: ['short', long], truncate: true });
    assert.equal(cut.data.length, 2);
    assert.equal(cut.usage.prompt_tokens, 512 + (await tokenize(modelDir, 'short')).length);
    assertUnit(cut.data[1].embedding, 'truncated input');
    const ids513 = [2, ...Array(511).fill(10), 3];
    await rejects400(client.embeddings.create({ model: 'demo-embed', input: ids513, encoding_format: 'float' }),
      'input', /513.*512/);
    const cutIds = await client.embeddings.create({ model: 'demo-embed', input: ids513, truncate: true });
    assert.equal(cutIds.usage.prompt_tokens, 512);
  });

  test('an unknown model is a 404; a model of another task is a 400', async () => {
    await assert.rejects(client.embeddings.create({ model: 'nope', input: TEXT }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      assert.equal(e.code, 'model_not_found');
      return true;
    });
    await rejects400(client.embeddings.create({ model: 'echo', input: TEXT }), 'model', /serves task 'echo'/);
  });

  test('the demo checkpoint is the same bytes on every write', async () => {
    const again = path.join(tempDir(), 'again');
    const init = await runPrism(['demo', 'init', again]);
    assert.equal(init.code, 0, init.stderr);
    assert.match(init.stdout, /demo-embed\s+task embed/);
    for (const file of ['config.json', 'model.safetensors', 'tokenizer.json', 'modules.json', '1_Pooling/config.json']) {
      assert.ok(fs.readFileSync(path.join(modelDir, file)).equals(fs.readFileSync(path.join(again, 'demo-embed', file))), file);
    }
    assert.ok(fs.statSync(path.join(again, 'demo-embed', '2_Normalize')).isDirectory());
  });

  test('priority bulk and user are accepted', async () => {
    const r = await client.embeddings.create({ model: 'demo-embed', input: TEXT, priority: 'bulk', user: 'u-1' });
    assert.ok(maxRelError(r.data[0].embedding, alone) < 1e-6);
  });
});

describe('every BERT-family layout', () => {
  let server;
  let client;
  const dirOf = (layout) => path.join(layoutRoot, layout);
  before(async () => {
    await layoutsReady;
    const deployments = LAYOUTS.map((l) => `
[[deployment]]
name = "${l}"
task = "embed"
model = ${JSON.stringify(dirOf(l))}
`).join('');
    server = await startServer({
      config: `[server]\nhost = "127.0.0.1"\n\n[[deployment]]\nname = "echo"\ntask = "echo"\n${deployments}`,
    });
    client = clientOf(server);
  });
  after(async () => { if (server) assert.equal(await server.stop(), 0); });

  for (const layout of LAYOUTS) {
    test(`${layout}: token arrays match the PyTorch reference`, async () => {
      const ref = readReference(dirOf(layout));
      const r = await client.embeddings.create({ model: layout, input: ref.sequences });
      assert.equal(r.data.length, ref.sequences.length);
      for (let s = 0; s < ref.sequences.length; s++) {
        const err = maxRelError(r.data[s].embedding, ref.embeddings[s]);
        assert.ok(err <= PARITY, `${layout} sequence ${s} (${ref.sequences[s].length} tokens): max rel error ${err}`);
      }
      const total = ref.sequences.reduce((n, s) => n + s.length, 0);
      assert.deepEqual(r.usage, { prompt_tokens: total, total_tokens: total });
      const normalized = !['bert', 'gte'].includes(layout);
      const raw = await post(server, { model: layout, input: ref.sequences[0] });
      assert.deepEqual(raw.body.prism, {
        embedding_space: raw.headers.get('x-prism-embedding-space'), dims: ref.dims, normalized,
      });
      if (normalized) assertUnit(r.data[0].embedding, layout);
    });

    test(`${layout}: text embeds as its tokens; too long is a 400 unless truncate`, async () => {
      const ref = readReference(dirOf(layout));
      const maxTokens = ref.sequences.at(-1).length;  // the reference's last sequence is the maximum
      const ids = await tokenize(dirOf(layout), TEXT);
      const [byText, byIds] = await Promise.all([
        client.embeddings.create({ model: layout, input: TEXT, encoding_format: 'float' }),
        client.embeddings.create({ model: layout, input: [ids], encoding_format: 'float' }),
      ]);
      assert.ok(maxRelError(byText.data[0].embedding, byIds.data[0].embedding) < 1e-6);
      assert.equal(byText.usage.prompt_tokens, ids.length);
      const long = 'hello world '.repeat(maxTokens);
      const n = (await tokenize(dirOf(layout), long)).length;
      await rejects400(client.embeddings.create({ model: layout, input: long, encoding_format: 'float' }),
        'input', new RegExp(`${n}.*${maxTokens}`));
      const cut = await client.embeddings.create({ model: layout, input: long, truncate: true });
      assert.equal(cut.usage.prompt_tokens, maxTokens);
      await rejects400(client.embeddings.create({ model: layout, input: TEXT, dimensions: ref.dims + 1 }),
        'dimensions', new RegExp(`${ref.dims}`));
    });
  }

  test('each layout is its own embedding space', async () => {
    const spaces = new Set();
    for (const layout of LAYOUTS) {
      const raw = await post(server, { model: layout, input: TEXT });
      assert.equal(raw.status, 200, raw.text);
      spaces.add(raw.headers.get('x-prism-embedding-space'));
    }
    assert.equal(spaces.size, LAYOUTS.length);
  });

  test('dimensions on a layout: shorter unit vectors', async () => {
    const r = await client.embeddings.create({ model: 'minilm', input: TEXT, dimensions: 16 });
    assert.equal(r.data[0].embedding.length, 16);
    assertUnit(r.data[0].embedding, 'minilm dimensions 16');
  });
});
