// The HTTP I/O threads stay free while requests wait on slow work: a 10-minute transcription
// to "demo-asr" is being decoded (its upload decoded and cut on the audio pool, its chunks on
// the ASR deployment), and three chat requests to "demo-vlm" name an image on a local host that
// holds every answer until the test releases it (more requests than the server's two I/O
// threads). While they run, /health and a small embeddings request to "demo-embed" answer;
// then the host answers, the chats complete with the image's tokens counted, and the
// transcription completes whole. The test asserts the order of completion, never a time: if
// the fetches or the audio held the I/O threads, /health would wait for the release or the
// transcript (a fallback releases the host after 60 s, so a regression fails on the order
// instead of hanging).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { metricValue, runPrism, startServer, tempDir } from './lib/server.mjs';
import { poll, postJson } from './lib/chat.mjs';
import { png } from './lib/png.mjs';
import { speech, wav } from './lib/speech_wav.mjs';

const NUM_CHATS = 3;
const IMAGE = png(48, 40, (x, y) => [(x * 5) % 256, (y * 6) % 256, (x + y) % 256]);
const AUDIO_SECONDS = 600;

// A media host that answers nothing until release(); `received` counts the requests it holds.
function holdingHost() {
  const held = [];
  let released = false;
  const host = {
    received: 0,
    arrivals: [],  // resolvers waiting for a count
    server: http.createServer((req, res) => {
      const answer = () => res.writeHead(200, { 'content-type': 'image/png' }).end(IMAGE);
      host.received++;
      for (const a of host.arrivals.splice(0)) a();
      if (released) answer();
      else held.push(answer);
    }),
    release() {
      released = true;
      for (const answer of held.splice(0)) answer();
    },
    async until(count) {
      while (host.received < count) await new Promise((resolve) => host.arrivals.push(resolve));
    },
  };
  return host;
}

// POST /v1/audio/transcriptions of a WAV → {status, body (parsed JSON or undefined), text}.
async function transcribe(server, audio) {
  const form = new FormData();
  form.append('file', new Blob([audio], { type: 'audio/wav' }), 'long.wav');
  form.append('model', 'demo-asr');
  form.append('response_format', 'verbose_json');
  const r = await fetch(server.url + '/v1/audio/transcriptions', { method: 'POST', body: form });
  const text = await r.text();
  let body;
  try { body = JSON.parse(text); } catch { body = undefined; }
  return { status: r.status, body, text };
}

async function asrTokens(server) {
  const text = await (await fetch(server.url + '/metrics')).text();
  return metricValue(text, 'prism_generate_generation_tokens_total', { deployment: 'demo-asr' }) ?? 0;
}

describe('slow media and long audio do not hold the I/O threads', () => {
  let server;
  let host;
  let hostUrl;
  let audio;
  before(async () => {
    audio = wav(speech(AUDIO_SECONDS, 11));
    const dir = tempDir();
    const init = await runPrism(['demo', 'init', dir], { timeoutMs: 120000 });
    assert.equal(init.code, 0, init.stderr);
    host = holdingHost();
    await new Promise((resolve) => host.server.listen(0, '127.0.0.1', resolve));
    hostUrl = `http://127.0.0.1:${host.server.address().port}/image.png`;
    const config = [
      '[server.limits]', 'num_io_threads = 2', 'num_media_threads = 4', '',
      '[[deployment]]', 'name = "demo-vlm"', 'task = "chat"', `model = "${path.join(dir, 'demo-vlm')}"`,
      '[deployment.knobs]', 'kv_cache_bytes = 16777216', 'allowed_media_hosts = "127.0.0.1"', '',
      '[[deployment]]', 'name = "demo-embed"', 'task = "embed"', `model = "${path.join(dir, 'demo-embed')}"`, '',
      '[[deployment]]', 'name = "demo-asr"', 'task = "transcribe"', `model = "${path.join(dir, 'demo-asr')}"`,
      '[deployment.knobs]', 'kv_cache_bytes = 8388608', 'vad = "energy"',
      '[deployment.batching]', 'max_batch_size = 8', '',
    ].join('\n');
    server = await startServer({ config });
  });
  after(async () => {
    host?.release();
    host?.server.close();
    if (server) assert.equal(await server.stop(), 0);
  });

  test('/health and embeddings answer while a transcription runs and chats wait on the media host', async () => {
    const order = [];
    const transcription = transcribe(server, audio).then((r) => { order.push('transcription'); return r; });
    // Wait until the audio is being decoded (tokens generated): the upload, its decoding and
    // its cutting are behind it.
    const decoding = await poll(async () => order.length > 0 || (await asrTokens(server)) > 0, 120000);
    assert.ok(decoding, 'the transcription never started decoding');
    assert.deepEqual(order, [], 'the transcription ended before the test could send anything');
    const chats = Array.from({ length: NUM_CHATS }, (_, i) =>
      postJson(server, '/v1/chat/completions', {
        model: 'demo-vlm', max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: hostUrl } },
          { type: 'text', text: `Picture ${i}?` }] }],
      }).then((r) => { order.push('chat'); return r; }));
    await host.until(NUM_CHATS);  // every fetch is in flight, held by the host
    const fallback = setTimeout(() => host.release(), 60000);
    const health = fetch(server.url + '/health').then(async (r) => { order.push('health'); return r.status; });
    const embed = postJson(server, '/v1/embeddings', { model: 'demo-embed', input: 'a small request' })
      .then((r) => { order.push('embeddings'); return r; });
    assert.equal(await health, 200);
    const e = await embed;
    assert.equal(e.status, 200, e.text);
    assert.equal(e.body.data.length, 1);
    assert.deepEqual([...order].sort(), ['embeddings', 'health'],
      `a chat or the transcription finished before /health and embeddings: ${order}`);
    host.release();
    clearTimeout(fallback);
    for (const c of await Promise.all(chats)) {
      assert.equal(c.status, 200, c.text);
      assert.ok(c.body.usage.prompt_tokens_details.image_tokens > 0, c.text);
    }
    const t = await transcription;
    assert.equal(t.status, 200, t.text);
    assert.ok(Math.abs(t.body.duration - AUDIO_SECONDS) < 0.05, `duration ${t.body.duration}`);
    assert.ok(t.body.segments.at(-1).end > AUDIO_SECONDS - 100, `the last segment ends at ${t.body.segments.at(-1).end}`);
    assert.deepEqual(order.slice(2).sort(), [...Array(NUM_CHATS).fill('chat'), 'transcription']);
  });
});
