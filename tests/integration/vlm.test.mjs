// Image and video understanding on the demo set's "demo-vlm" (a tiny random Idefics3 /
// SmolVLM: 32-px tiles, 4 image tokens a view, images split into at most 2 x 2 tiles plus a
// global view) and image embeddings on "demo-clip" (a tiny random CLIP), through the official
// `openai` client: image and video questions with their visual tokens in
// usage.prompt_tokens_details, the per-request `prism` budget knobs, a second turn served from
// the prefix cache without re-encoding, the media cache shared across conversations, two
// images never sharing KV, bad media as 400s naming the content part, local files only under
// allowed_local_media_dir, and texts and images embedded in one request as unit vectors.
// The weights are random: tests compare outputs with each other, never with fixed text.
//
// Media: PNGs are encoded by lib/png.mjs; the video is vlm_clip.mp4.base64, a 4-s, 10-fps,
// 64 x 48 MPEG-4 clip (3 KB) written by tests/test_util/video_writer.h with its default spec
// but 40 frames (write_video({.width = 64, .height = 48, .fps = 10, .num_frames = 40})).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { runPrism, startServer, tempDir, metricValue } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';
import { norm } from './lib/embeddings.mjs';
import { postJson, poll } from './lib/chat.mjs';
import { png } from './lib/png.mjs';

const { default: OpenAI } = await importDep('openai');

const VLM = 'demo-vlm';
// Two runs of the same request may take different kernels: a prefix-cache hit prefills only
// the tail (fewer rows: another GEMM blocking, or the decode kernel), so logits differ by f32
// summation order. demo-vlm's dot products have at most 256 terms of |x w| <= ~4: each differs
// by at most 256 * 2^-24 * 256 * 4 ~ 1.6e-5 (a generous worst case), and a logprob
// (logit - logsumexp) by at most twice that, times a few layers: 1e-4. A different image
// moves the first logprob by orders of magnitude more.
const LOGPROB_TOLERANCE = 1e-4;
function assertSameLogprob(got, want) {
  assert.ok(Math.abs(got - want) <= LOGPROB_TOLERANCE, `logprob ${got} vs ${want}`);
}
function assertOtherLogprob(got, want) {
  assert.ok(Math.abs(got - want) > 10 * LOGPROB_TOLERANCE, `logprob ${got} vs ${want}: the image made no difference`);
}
const CLIP = 'demo-clip';
const HERE = path.dirname(fileURLToPath(import.meta.url));
const VIDEO_URL = 'data:video/mp4;base64,' +
  fs.readFileSync(path.join(HERE, 'vlm_clip.mp4.base64'), 'utf8').replace(/\s+/g, '');

const dataUrl = (bytes) => 'data:image/png;base64,' + bytes.toString('base64');
// Gradients told apart by `seed`: different pixels, so different content keys.
const gradient = (width, height, seed) =>
  png(width, height, (x, y) => [(x * 5 + seed * 37) % 256, (y * 6 + seed * 11) % 256, (x + y + seed * 73) % 256]);
const imageUrl = (seed, width = 48, height = 40) => dataUrl(gradient(width, height, seed));

// ---- helpers --------------------------------------------------------------------------------

const imagePart = (url) => ({ type: 'image_url', image_url: { url } });
const videoPart = (url) => ({ type: 'video_url', video_url: { url } });
const ask = (parts, text = 'What is in this picture?') => [{ role: 'user', content: [...parts, { type: 'text', text }] }];

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

function clientOf(server) {
  return new OpenAI({ apiKey: 'sk-unused', baseURL: server.url + '/v1', maxRetries: 0, timeout: 120000 });
}

async function metrics(server, name) {
  const text = await (await fetch(server.url + '/metrics')).text();
  return metricValue(text, name, { deployment: VLM }) ?? 0;
}

async function whenReady(server) {
  const ready = await poll(async () => (await fetch(server.url + '/ready')).status === 200, 60000);
  assert.ok(ready, `the demo set did not get ready:\n${server.logs()}`);
}

const demoDir = tempDir();  // the demo set, written by the first server

describe('images and videos on demo-vlm, image embeddings on demo-clip', () => {
  let server;
  let client;
  before(async () => {
    server = await startServer({ config: null, args: ['--demo-dir', demoDir] });
    client = clientOf(server);
    await whenReady(server);
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  // Greedy, with the first token's logprob: the image must move it.
  const chat = (messages, extra = {}) => client.chat.completions.create({
    model: VLM, messages, temperature: 0, max_tokens: 8, logprobs: true, ...extra,
  });

  test('/v1/models lists demo-vlm (chat) and demo-clip (embed)', async () => {
    const tasks = {};
    for await (const m of client.models.list()) tasks[m.id] = m.prism.task;
    assert.equal(tasks[VLM], 'chat');
    assert.equal(tasks[CLIP], 'embed');
  });

  test('an image question: an answer, the image tokens in usage, the image changes the logits', async () => {
    const visual0 = await metrics(server, 'prism_vlm_visual_tokens_sum');
    const r = await chat(ask([imagePart(imageUrl(1))]));
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.model, VLM);
    const c = r.choices[0];
    assert.equal(typeof c.message.content, 'string');
    assert.ok(c.message.content.length > 0);
    assert.equal(c.finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 8);
    assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
    // 48 x 40 -> longest edge 64 -> 2 x 2 tiles of 32 + the global view, 4 tokens each.
    assert.equal(r.usage.prompt_tokens_details.image_tokens, 20, JSON.stringify(r.usage));
    assert.equal(r.usage.prompt_tokens_details.video_tokens, undefined);
    assert.equal(await metrics(server, 'prism_vlm_visual_tokens_sum'), visual0 + 20);
    const textOnly = await chat([{ role: 'user', content: 'What is in this picture?' }]);
    assert.ok(r.usage.prompt_tokens > textOnly.usage.prompt_tokens + 20, `${r.usage.prompt_tokens} vs ${textOnly.usage.prompt_tokens}`);
    assert.equal(textOnly.usage.prompt_tokens_details.image_tokens, undefined);
    // Another image, same text: other features, so other logits.
    const other = await chat(ask([imagePart(imageUrl(2))]));
    assert.equal(other.usage.prompt_tokens, r.usage.prompt_tokens);
    assertOtherLogprob(other.choices[0].logprobs.content[0].logprob, c.logprobs.content[0].logprob);
    // The same image again: the same answer (greedy), and the same logprob up to f32 rounding.
    const again = await chat(ask([imagePart(imageUrl(1))]));
    assert.equal(again.choices[0].message.content, c.message.content);
    assertSameLogprob(again.choices[0].logprobs.content[0].logprob, c.logprobs.content[0].logprob);
  });

  test('streaming an image question: the same text, usage with image tokens', async () => {
    const whole = await chat(ask([imagePart(imageUrl(3))]), { logprobs: false });
    const stream = await chat(ask([imagePart(imageUrl(3))]),
      { logprobs: false, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage;
    for await (const ch of stream) {
      text += ch.choices[0]?.delta?.content ?? '';
      if (ch.usage) usage = ch.usage;
    }
    assert.equal(text, whole.choices[0].message.content);
    assert.equal(usage.prompt_tokens_details.image_tokens, 20);
  });

  test('two images in one message, and the visual-token knobs of the prism field', async () => {
    const two = await chat(ask([imagePart(imageUrl(4)), imagePart(imageUrl(5))]));
    assert.equal(two.usage.prompt_tokens_details.image_tokens, 40);
    // No tiles: the global view only.
    const global = await chat(ask([imagePart(imageUrl(4))]), { prism: { max_image_tiles: 0 } });
    assert.equal(global.usage.prompt_tokens_details.image_tokens, 4);
    // 2 x 2 pooling of each view's 2 x 2 grid: one token a view.
    const pooled = await chat(ask([imagePart(imageUrl(4))]), { prism: { spatial_pool: 2 } });
    assert.equal(pooled.usage.prompt_tokens_details.image_tokens, 5);
    // A wide image capped at 32 px: one tile, so the global view only.
    const capped = await chat(ask([imagePart(imageUrl(4, 64, 16))]), { prism: { max_image_side: 32 } });
    assert.equal(capped.usage.prompt_tokens_details.image_tokens, 4);
    await rejects400(chat(ask([imagePart(imageUrl(4))]), { prism: { spatial_pool: 3 } }), 'prism.spatial_pool', /spatial_pool/);
    await rejects400(chat(ask([imagePart(imageUrl(4))]), { prism: { max_image_tilez: 1 } }), 'prism.max_image_tilez', /max_image_tilez/);
  });

  test('a video question: frames sampled at 1 fps by default, the video tokens in usage', async () => {
    const frames0 = await metrics(server, 'prism_vlm_frames_sampled_total');
    const r = await chat(ask([videoPart(VIDEO_URL)], 'What happens in this video?'));
    assert.ok(r.choices[0].message.content.length > 0);
    // 4 s at 1 fps: 4 frames, each a 2 x 2 grid pooled 2 x 2 (video_spatial_pool 2): 4 tokens.
    assert.equal(r.usage.prompt_tokens_details.video_tokens, 4, JSON.stringify(r.usage));
    assert.equal(r.usage.prompt_tokens_details.image_tokens, undefined);
    assert.equal(await metrics(server, 'prism_vlm_frames_sampled_total'), frames0 + 4);
    // Per request: 2 frames; no spatial pooling (4 tokens a frame); temporal pooling of pairs.
    const two = await chat(ask([videoPart(VIDEO_URL)], 'What happens in this video?'), { prism: { video_num_frames: 2 } });
    assert.equal(two.usage.prompt_tokens_details.video_tokens, 2);
    const full = await chat(ask([videoPart(VIDEO_URL)], 'What happens?'), { prism: { video_spatial_pool: 1 } });
    assert.equal(full.usage.prompt_tokens_details.video_tokens, 16);
    const paired = await chat(ask([videoPart(VIDEO_URL)], 'What happens?'), { prism: { temporal_pool: 2 } });
    assert.equal(paired.usage.prompt_tokens_details.video_tokens, 2);
    // An image and a video in one message.
    const both = await chat(ask([imagePart(imageUrl(6)), videoPart(VIDEO_URL)], 'Compare them.'));
    assert.equal(both.usage.prompt_tokens_details.image_tokens, 20);
    assert.equal(both.usage.prompt_tokens_details.video_tokens, 4);
  });

  test('a second turn on the same image comes from the prefix cache, encoding nothing; another conversation hits the media cache', async () => {
    const image = imageUrl(7);
    const turn1 = await chat(ask([imagePart(image)], 'Describe this picture.'));
    const encoded0 = await metrics(server, 'prism_vlm_encoder_seconds_per_image_count');
    const hits0 = await metrics(server, 'prism_media_cache_hits_total');
    const lookups0 = await metrics(server, 'prism_media_cache_lookups_total');

    const turn2 = await chat([
      ...ask([imagePart(image)], 'Describe this picture.'),
      { role: 'assistant', content: turn1.choices[0].message.content },
      { role: 'user', content: 'Tell me more.' },
    ]);
    assert.ok(turn2.usage.prompt_tokens > turn1.usage.prompt_tokens);
    // The first turn's blocks, visual tokens included, were reused.
    const cached = turn2.usage.prompt_tokens_details.cached_tokens;
    assert.ok(cached >= 32 && cached <= turn1.usage.prompt_tokens, `cached ${cached} of ${turn1.usage.prompt_tokens}`);
    assert.equal(turn2.usage.prompt_tokens_details.image_tokens, 20);
    assert.equal(await metrics(server, 'prism_vlm_encoder_seconds_per_image_count'), encoded0, 'the second turn encoded again');
    assert.equal(await metrics(server, 'prism_media_cache_lookups_total'), lookups0);

    // The same image after another system prompt: no shared prefix, but the encoder output
    // comes from the media cache.
    const elsewhere = await chat([{ role: 'system', content: 'Answer in one word.' }, ...ask([imagePart(image)])]);
    assert.equal(elsewhere.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(await metrics(server, 'prism_media_cache_hits_total'), hits0 + 1);
    assert.equal(await metrics(server, 'prism_vlm_encoder_seconds_per_image_count'), encoded0);
    assert.ok((await metrics(server, 'prism_media_cache_bytes')) > 0);
  });

  test('two different images behind identical placeholder ids never share KV', async () => {
    const a = await chat(ask([imagePart(imageUrl(8))]));
    const b = await chat(ask([imagePart(imageUrl(9))]));
    // Same token ids (the same placeholders); the first block already holds visual tokens.
    assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
    assert.equal(b.usage.prompt_tokens_details.cached_tokens, 0);
    assertOtherLogprob(b.choices[0].logprobs.content[0].logprob, a.choices[0].logprobs.content[0].logprob);
    const aAgain = await chat(ask([imagePart(imageUrl(8))]));
    assert.ok(aAgain.usage.prompt_tokens_details.cached_tokens > 0);
    assertSameLogprob(aAgain.choices[0].logprobs.content[0].logprob, a.choices[0].logprobs.content[0].logprob);
  });

  test('bad media: 400s naming the content part', async () => {
    const text = { type: 'text', text: 'Look.' };
    const truncated = 'data:image/png;base64,' + gradient(16, 16, 1).subarray(0, 60).toString('base64');
    await rejects400(chat([{ role: 'user', content: [text, imagePart(truncated)] }]),
      'messages[0].content[1]', /corrupt PNG image/);
    await rejects400(chat([{ role: 'user', content: [text, imagePart('data:image/png;base64,aGVsbG8gd29ybGQ=')] }]),
      'messages[0].content[1]', /PNG, JPEG, WebP or GIF/);
    await rejects400(chat([{ role: 'user', content: [text, imagePart('data:image/png;base64,!!!')] }]),
      'messages[0].content[1]', /base64/);
    await rejects400(chat([{ role: 'user', content: [imagePart('https://example.com/cat.png')] }]),
      'messages[0].content[0]', /remote/);
    await rejects400(chat([{ role: 'user', content: [imagePart('file:///etc/hostname')] }]),
      'messages[0].content[0]', /local files are not enabled/);
    await rejects400(chat([{ role: 'user', content: [videoPart('data:video/mp4;base64,aGVsbG8gd29ybGQ=')] }]),
      'messages[0].content[0]', /video/);
    // A text-only model refuses image parts.
    await rejects400(client.chat.completions.create({ model: 'demo-chat', messages: ask([imagePart(imageUrl(1))]) }),
      'messages', /image_url/);
    // Raw: the OpenAI error shape.
    const raw = await postJson(server, '/v1/chat/completions',
      { model: VLM, max_tokens: 2, messages: [{ role: 'user', content: [imagePart(truncated)] }] });
    assert.equal(raw.status, 400);
    assert.equal(raw.body.error.type, 'invalid_request_error');
    assert.equal(raw.body.error.param, 'messages[0].content[0]');
  });

  test('embeddings: texts and images in one request on demo-clip, unit vectors of one size', async () => {
    const image = { type: 'image_url', image_url: { url: imageUrl(10) } };
    const r = await client.embeddings.create({
      model: CLIP, input: ['a photo of a cat', image, 'a red car', { image: imageUrl(11) }], encoding_format: 'float',
    });
    assert.equal(r.model, CLIP);
    assert.deepEqual(r.data.map((d) => d.index), [0, 1, 2, 3]);
    for (const d of r.data) {
      assert.equal(d.embedding.length, 32);
      assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `input ${d.index}: norm ${norm(d.embedding)}`);
    }
    assert.ok(r.usage.prompt_tokens > 0);
    // Each input alone gives the same vector; two images give two vectors.
    const alone = await client.embeddings.create({ model: CLIP, input: [image], encoding_format: 'float' });
    const text = await client.embeddings.create({ model: CLIP, input: 'a photo of a cat', encoding_format: 'float' });
    const close = (a, b) => a.every((x, i) => Math.abs(x - b[i]) < 1e-5);
    assert.ok(close(alone.data[0].embedding, r.data[1].embedding));
    assert.ok(close(text.data[0].embedding, r.data[0].embedding));
    assert.ok(!close(r.data[1].embedding, r.data[3].embedding));
    // The SDK's default (base64) decodes to the same vectors.
    const b64 = await client.embeddings.create({ model: CLIP, input: [image] });
    assert.ok(close(b64.data[0].embedding, alone.data[0].embedding));
    // A corrupt image names the input; a text-only embedder refuses images.
    await assert.rejects(client.embeddings.create({
      model: CLIP, input: ['ok', { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }],
    }), (e) => e.status === 400 && /input\[1\]/.test(e.message) && /PNG/.test(e.message));
    await assert.rejects(client.embeddings.create({ model: 'demo-embed', input: [image] }), (e) => e.status === 400);
  });
});

describe('local media files on demo-vlm: only under allowed_local_media_dir', () => {
  const allowed = tempDir();
  const outside = tempDir();
  let server;
  let client;
  before(async () => {
    const init = await runPrism(['demo', 'init', demoDir], { timeoutMs: 60000 });
    assert.equal(init.code, 0, init.stderr);
    fs.writeFileSync(path.join(allowed, 'inside.png'), gradient(48, 40, 12));
    fs.writeFileSync(path.join(outside, 'outside.png'), gradient(48, 40, 13));
    fs.symlinkSync(path.join(outside, 'outside.png'), path.join(allowed, 'link.png'));
    const quote = (s) => JSON.stringify(s);
    server = await startServer({
      config: `
[server]
host = "127.0.0.1"
port = 8080

[[deployment]]
name = ${quote(VLM)}
task = "chat"
model = ${quote(path.join(demoDir, VLM))}
[deployment.knobs]
kv_cache_bytes = 16777216
allowed_local_media_dir = ${quote(allowed)}
`,
    });
    client = clientOf(server);
    await whenReady(server);
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  const look = (url) => client.chat.completions.create({
    model: VLM, messages: ask([imagePart(url)]), temperature: 0, max_tokens: 2,
  });

  test('a file in the allowed directory is read; the same pixels as a data URL give the same answer', async () => {
    const file = await look('file://' + path.join(allowed, 'inside.png'));
    assert.equal(file.usage.prompt_tokens_details.image_tokens, 20);
    const inline = await look(dataUrl(gradient(48, 40, 12)));
    assert.equal(inline.choices[0].message.content, file.choices[0].message.content);
  });

  test('files outside it are refused: another directory, "..", a symlink out, a missing file', async () => {
    await rejects400(look('file://' + path.join(outside, 'outside.png')), 'messages[0].content[0]', /outside the allowed directory/);
    await rejects400(look(`file://${allowed}/../${path.basename(outside)}/outside.png`),
      'messages[0].content[0]', /outside the allowed directory/);
    await rejects400(look('file://' + path.join(allowed, 'link.png')), 'messages[0].content[0]', /outside the allowed directory/);
    await assert.rejects(look('file://' + path.join(allowed, 'missing.png')),
      (e) => [400, 404].includes(e.status) && e.param === 'messages[0].content[0]');
  });
});
