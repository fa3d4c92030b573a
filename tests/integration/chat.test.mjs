// /v1/chat/completions and /v1/completions on the demo set's "demo-chat" (a tiny random Llama
// with a ChatML template), through the official `openai` client and raw SSE: responses and
// streams in OpenAI's shapes, include_usage, n, seed reproducibility, stop strings, logprobs
// (both shapes), finish "length", the context-length 400 with its numbers, the four prompt
// forms, echo, errors naming their parameter, and a client that disconnects mid-stream
// freeing its sequence and KV blocks. The demo's weights are random: tests compare outputs
// with each other (greedy is deterministic), never with fixed text.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, tempDir, metricValue } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';
import { tokenize } from './lib/embeddings.mjs';
import { postJson, sseEvents, streamUntil, poll } from './lib/chat.mjs';

const { default: OpenAI } = await importDep('openai');

const MODEL = 'demo-chat';
const CONTEXT = 2048;  // the demo's max_position_embeddings
const MESSAGES = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: 'Tell me a story about a fox.' },
];

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

function assertUsage(usage, completionTokens) {
  assert.ok(usage.prompt_tokens > 0, JSON.stringify(usage));
  if (completionTokens !== undefined) assert.equal(usage.completion_tokens, completionTokens);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens);
  assert.equal(typeof usage.prompt_tokens_details.cached_tokens, 'number');
  assert.ok(usage.prompt_tokens_details.cached_tokens <= usage.prompt_tokens);
}

const demoDir = tempDir();  // the demo set, written by the first server

describe('chat on the demo set', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ config: null, args: ['--demo-dir', demoDir] });
    client = new OpenAI({ apiKey: 'sk-unused', baseURL: server.url + '/v1', maxRetries: 0, timeout: 120000 });
    const ready = await poll(async () => (await fetch(server.url + '/ready')).status === 200, 60000);
    assert.ok(ready, `the demo set did not get ready:\n${server.logs()}`);
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  // Greedy replies are deterministic; the helpers below share them.
  const greedy = (extra = {}) =>
    client.chat.completions.create({ model: MODEL, messages: MESSAGES, temperature: 0, max_tokens: 12, ...extra });

  test('/v1/models lists demo-chat with task chat', async () => {
    const ids = [];
    for await (const m of client.models.list()) {
      ids.push(m.id);
      if (m.id === MODEL) assert.equal(m.prism.task, 'chat');
    }
    assert.ok(ids.includes(MODEL), ids.join(', '));
  });

  test('chat completion: OpenAI shape, finish "length" at max_tokens, usage', async () => {
    const r = await greedy();
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-\S+/);
    assert.equal(r.model, MODEL);
    assert.equal(typeof r.created, 'number');
    assert.match(r.system_fingerprint, /^prism-/);
    assert.equal(r.choices.length, 1);
    const c = r.choices[0];
    assert.equal(c.index, 0);
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    assert.ok(c.message.content.length > 0);
    assert.equal(c.logprobs, null);
    assert.equal(c.finish_reason, 'length');
    assertUsage(r.usage, 12);
    // a longer conversation has more prompt tokens
    const longer = await greedy({ messages: [...MESSAGES, { role: 'assistant', content: 'Once.' }, { role: 'user', content: 'More.' }] });
    assert.ok(longer.usage.prompt_tokens > r.usage.prompt_tokens);
    // the same request again: the same text (greedy), its prompt now in the prefix cache
    const again = await greedy();
    assert.equal(again.choices[0].message.content, c.message.content);
  });

  test('streaming with include_usage: role chunk, content deltas, finish chunk, usage chunk, [DONE]', async () => {
    const whole = await greedy();
    const stream = await greedy({ stream: true, stream_options: { include_usage: true } });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    assert.ok(chunks.length >= 4, `${chunks.length} chunks`);
    for (const ch of chunks) {
      assert.equal(ch.object, 'chat.completion.chunk');
      assert.equal(ch.id, chunks[0].id);
      assert.equal(ch.model, MODEL);
    }
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
    const last = chunks.at(-1);
    assert.deepEqual(last.choices, []);
    assertUsage(last.usage, 12);
    assert.equal(last.usage.prompt_tokens, whole.usage.prompt_tokens);
    const body = chunks.slice(0, -1);
    for (const ch of body) assert.equal(ch.usage, null);
    const finish = body.at(-1).choices[0];
    assert.deepEqual(finish.delta, {});
    assert.equal(finish.finish_reason, 'length');
    const text = body.map((ch) => ch.choices[0].delta.content ?? '').join('');
    assert.equal(text, whole.choices[0].message.content);
    for (const ch of body.slice(0, -1)) assert.equal(ch.choices[0].finish_reason, null);

    // raw: the stream's events end with [DONE]
    const raw = await postJson(server, '/v1/chat/completions',
      { model: MODEL, messages: MESSAGES, temperature: 0, max_tokens: 3, stream: true });
    assert.equal(raw.status, 200);
    assert.match(raw.headers.get('content-type'), /text\/event-stream/);
    const events = sseEvents(raw.text);
    assert.equal(events.at(-1), '[DONE]');
    assert.ok(events.slice(0, -1).every((e) => !('usage' in e)), 'no usage key without include_usage');
  });

  test('n = 2: two choices; greedy ones agree, usage counts both', async () => {
    const r = await greedy({ n: 2, max_tokens: 6 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
    assert.equal(r.choices[0].message.content, r.choices[1].message.content);
    assertUsage(r.usage, 12);
    const s = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, n: 2, max_tokens: 5, stream: true });
    const seen = new Set();
    let finished = 0;
    for await (const ch of s) {
      for (const c of ch.choices) {
        seen.add(c.index);
        if (c.finish_reason) finished += 1;
      }
    }
    assert.deepEqual([...seen].sort(), [0, 1]);
    assert.equal(finished, 2);
  });

  test('seed: the same seed gives the same sampled text', async () => {
    const ask = (seed) => client.chat.completions.create({
      model: MODEL, messages: MESSAGES, temperature: 1, max_tokens: 24, seed,
    });
    const a = await ask(1234);
    const b = await ask(1234);
    assert.equal(a.choices[0].message.content, b.choices[0].message.content);
    // n choices of one seeded request are reproducible too
    const n1 = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, temperature: 1, max_tokens: 16, seed: 7, n: 2 });
    const n2 = await client.chat.completions.create({ model: MODEL, messages: MESSAGES, temperature: 1, max_tokens: 16, seed: 7, n: 2 });
    assert.deepEqual(n1.choices.map((c) => c.message.content), n2.choices.map((c) => c.message.content));
  });

  test('stop: the text ends before the stop string, finish "stop"', async () => {
    const full = (await greedy({ max_tokens: 32 })).choices[0].message.content;
    const words = full.split(/\s+/).filter((w) => w.length >= 2);
    assert.ok(words.length >= 3, `a reply with words: ${JSON.stringify(full)}`);
    const stop = words[2];
    const cut = full.indexOf(stop);
    const r = await greedy({ max_tokens: 32, stop: [stop, 'never-appears'] });
    assert.equal(r.choices[0].message.content, full.slice(0, cut));
    assert.equal(r.choices[0].finish_reason, 'stop');
    // streamed: the same text, never the stop string
    const s = await greedy({ max_tokens: 32, stop, stream: true });
    let text = '';
    let reason;
    for await (const ch of s) {
      text += ch.choices[0]?.delta?.content ?? '';
      reason = ch.choices[0]?.finish_reason ?? reason;
    }
    assert.equal(text, full.slice(0, cut));
    assert.equal(reason, 'stop');
  });

  test('logprobs with top_logprobs: one entry per token, greedy picks the top one', async () => {
    const r = await greedy({ max_tokens: 6, logprobs: true, top_logprobs: 3 });
    const c = r.choices[0];
    const content = c.logprobs.content;
    assert.equal(content.length, r.usage.completion_tokens);
    for (const e of content) {
      assert.equal(typeof e.token, 'string');
      assert.ok(e.logprob <= 0, String(e.logprob));
      assert.ok(Array.isArray(e.bytes));
      assert.equal(e.top_logprobs.length, 3);
      for (let i = 1; i < 3; ++i) assert.ok(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob);
      assert.ok(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6, 'greedy: the chosen token is the likeliest');
    }
    assert.equal(content.map((e) => e.token).join(''), c.message.content);
    assert.deepEqual(content.flatMap((e) => e.bytes), [...Buffer.from(c.message.content, 'utf8')]);
    // streamed: the same entries, spread over the chunks
    const s = await greedy({ max_tokens: 6, logprobs: true, top_logprobs: 3, stream: true });
    const streamed = [];
    for await (const ch of s) streamed.push(...(ch.choices[0]?.logprobs?.content ?? []));
    assert.deepEqual(streamed.map((e) => e.token), content.map((e) => e.token));
  });

  test('a prompt past the context is a 400 with the numbers', async () => {
    await rejects400(greedy({ max_tokens: 5000 }), 'messages',
      new RegExp(`maximum context length is ${CONTEXT} tokens.*\\d+ in the messages, 5000 in the completion`));
    const long = 'story '.repeat(3000);
    await assert.rejects(greedy({ messages: [{ role: 'user', content: long }], max_tokens: undefined }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, 'messages');
      assert.equal(e.code, 'context_length_exceeded');
      assert.match(e.message, new RegExp(`maximum context length is ${CONTEXT} tokens`));
      return true;
    });
  });

  test('bad requests: 400 naming the parameter; 404 for an unknown model', async () => {
    await rejects400(greedy({ temperature: 3 }), 'temperature', /between 0.0 and 2.0/);
    await rejects400(greedy({ top_logprobs: 2 }), 'top_logprobs', /requires logprobs/);
    await rejects400(greedy({ n: 0 }), 'n', /between 1 and 16/);
    await rejects400(greedy({ stop: ['a', 'b', 'c', 'd', 'e'] }), 'stop', /at most 4/);
    await rejects400(greedy({ response_format: { type: 'json_object' } }), 'response_format', /not supported/);
    await rejects400(greedy({ stop_token_ids: [99999999] }), 'stop_token_ids', /outside this model's vocabulary/);
    await rejects400(greedy({ min_tokens: 50, max_tokens: 5 }), 'min_tokens', /min_tokens \(50\) is more than max_tokens \(5\)/);
    await rejects400(greedy({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }),
      'messages', /messages\[0\]\.content\[0\] has type 'image_url'/);
    await rejects400(greedy({ messages: [] }), 'messages', /empty/);
    await rejects400(greedy({ model: 'demo-embed' }), 'model', /serves task 'embed'/);
    await assert.rejects(greedy({ model: 'nope' }), (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  });

  test('completions: string prompt, token prompt, echo, legacy logprobs', async () => {
    const prompt = 'Once upon a time';
    const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 6, temperature: 0 });
    assert.equal(r.object, 'text_completion');
    assert.match(r.id, /^cmpl-\S+/);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(typeof r.choices[0].text, 'string');
    assertUsage(r.usage, 6);

    const ids = await tokenize(path.join(demoDir, MODEL), prompt);
    const t = await client.completions.create({ model: MODEL, prompt: ids, max_tokens: 6, temperature: 0 });
    assert.equal(t.usage.prompt_tokens, ids.length);
    assert.equal(t.usage.prompt_tokens, r.usage.prompt_tokens);
    assert.equal(t.choices[0].text, r.choices[0].text);

    const e = await client.completions.create({ model: MODEL, prompt, max_tokens: 6, temperature: 0, echo: true, logprobs: 2 });
    assert.equal(e.choices[0].text, prompt + r.choices[0].text);
    const lp = e.choices[0].logprobs;
    assert.equal(lp.tokens.length, 6);
    assert.equal(lp.token_logprobs.length, 6);
    assert.equal(lp.top_logprobs.length, 6);
    for (const top of lp.top_logprobs) assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 2);
    assert.equal(lp.text_offset[0], Buffer.byteLength(prompt));
    for (let i = 1; i < 6; ++i) assert.equal(lp.text_offset[i], lp.text_offset[i - 1] + Buffer.byteLength(lp.tokens[i - 1]));
    assert.equal(lp.tokens.join(''), r.choices[0].text);
  });

  test('completions: several prompts × n, indexed prompt * n + k; streamed as text_completion chunks', async () => {
    const prompts = ['Once upon a time', 'The fox'];
    const r = await client.completions.create({ model: MODEL, prompt: prompts, n: 2, max_tokens: 4, temperature: 0 });
    assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2, 3]);
    const one = await Promise.all(prompts.map((p) =>
      client.completions.create({ model: MODEL, prompt: p, max_tokens: 4, temperature: 0 })));
    assert.equal(r.choices[0].text, one[0].choices[0].text);
    assert.equal(r.choices[1].text, one[0].choices[0].text);
    assert.equal(r.choices[2].text, one[1].choices[0].text);
    assert.equal(r.choices[3].text, one[1].choices[0].text);
    assert.equal(r.usage.prompt_tokens, one[0].usage.prompt_tokens + one[1].usage.prompt_tokens);
    assert.equal(r.usage.completion_tokens, 16);

    const s = await client.completions.create({
      model: MODEL, prompt: prompts, max_tokens: 4, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    const texts = ['', ''];
    let usage;
    for await (const ch of s) {
      assert.equal(ch.object, 'text_completion');
      for (const c of ch.choices) texts[c.index] += c.text;
      if (ch.usage) usage = ch.usage;
    }
    assert.deepEqual(texts, [one[0].choices[0].text, one[1].choices[0].text]);
    assert.equal(usage.completion_tokens, 8);
  });

  test('completions: bad prompts and fields are 400s naming them', async () => {
    const create = (extra) => client.completions.create({ model: MODEL, prompt: 'x', max_tokens: 2, ...extra });
    await rejects400(create({ prompt: '' }), 'prompt', /prompt is an empty string/);
    await rejects400(create({ prompt: [[1], []] }), 'prompt', /prompt\[1\] is an empty token array/);
    await rejects400(create({ prompt: [5, 99999999] }), 'prompt', /token id 99999999 at position 1/);
    await rejects400(create({ suffix: 'end' }), 'suffix', /not supported/);
    await rejects400(create({ best_of: 3 }), 'best_of', /must equal n/);
    await rejects400(create({ logprobs: 6 }), 'logprobs', /at most 5/);
    await rejects400(create({ max_tokens: 4000 }), 'prompt', /maximum context length is 2048 tokens/);
  });

  test('a client that disconnects mid-stream cancels its sequence and frees its KV blocks', async () => {
    // NOTE: 16 choices of 1900 tokens take the demo seconds, so the abort after the first
    // content chunk lands mid-generation; the cancelled count proves it was the disconnect.
    const labels = { deployment: MODEL };
    const before = metricValue(await (await fetch(server.url + '/metrics')).text(), 'prism_requests_total',
      { ...labels, status: 'cancelled' }) ?? 0;
    const seen = await streamUntil(server, '/v1/chat/completions', {
      model: MODEL, messages: MESSAGES, max_tokens: 1900, ignore_eos: true, n: 16, stream: true,
    }, (e) => e !== '[DONE]' && Boolean(e.choices?.[0]?.delta?.content));
    assert.ok(seen.at(-1) !== '[DONE]', `the stream ended before the abort: ${seen.length} events`);
    const settled = await poll(async () => {
      const text = await (await fetch(server.url + '/metrics')).text();
      const running = metricValue(text, 'prism_generate_sequences_running', labels);
      const usage = metricValue(text, 'prism_kv_cache_usage_ratio', labels);
      const cancelled = metricValue(text, 'prism_requests_total', { ...labels, status: 'cancelled' });
      // NOTE: the engine frees the blocks and updates its gauges before it completes the
      // request, so the cancelled count can lag the gauges by a moment: wait for all three.
      return running === 0 && usage === 0 && cancelled === before + 1 ? { running, usage, cancelled } : null;
    }, 15000);
    assert.ok(settled, 'running sequences and KV usage back to 0 and the request counted as cancelled');
  });
});

describe('a request that outlives its deadline', () => {
  let server;
  before(async () => {
    server = await startServer({
      config: `
[[deployment]]
name = "short"
task = "chat"
model = "${path.join(demoDir, MODEL)}"
timeout_ms = 300
[deployment.knobs]
kv_cache_bytes = 16777216
`,
    });
    const ready = await poll(async () => (await fetch(server.url + '/ready')).status === 200, 60000);
    assert.ok(ready, `the deployment did not get ready:\n${server.logs()}`);
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  // NOTE: 16 choices of 1900 tokens take the demo seconds: far past the 300 ms deadline.
  const long = { model: 'short', messages: MESSAGES, max_tokens: 1900, ignore_eos: true, n: 16 };

  test('streamed: an error event after the chunks, then [DONE]', async () => {
    const r = await postJson(server, '/v1/chat/completions', { ...long, stream: true });
    assert.equal(r.status, 200);
    const events = sseEvents(r.text);
    assert.equal(events.at(-1), '[DONE]');
    const error = events.at(-2);
    assert.equal(error.error.code, 'timeout', JSON.stringify(error));
    assert.equal(error.error.type, 'server_error');
    assert.deepEqual(events[0].choices[0].delta, { role: 'assistant', content: '' });
  });

  test('not streamed: a 504', async () => {
    const r = await postJson(server, '/v1/chat/completions', long);
    assert.equal(r.status, 504);
    assert.equal(r.body.error.code, 'timeout');
  });
});
