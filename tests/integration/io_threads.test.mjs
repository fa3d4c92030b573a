// The HTTP I/O threads stay free while requests wait on slow media: three chat requests to
// "demo-vlm" name an image on a local host that holds every answer until the test releases it
// (more requests than the server's two I/O threads). While they wait, /health and a small
// embeddings request to "demo-embed" answer; then the host answers and the chats complete with
// the image's tokens counted. The test asserts the order of completion, never a time: if the
// fetches held the I/O threads, /health would wait for the release (a fallback releases the
// host after 30 s, so a regression fails on the order instead of hanging).
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { runPrism, startServer, tempDir } from './lib/server.mjs';
import { postJson } from './lib/chat.mjs';
import { png } from './lib/png.mjs';

const NUM_CHATS = 3;
const IMAGE = png(48, 40, (x, y) => [(x * 5) % 256, (y * 6) % 256, (x + y) % 256]);

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

describe('slow media do not hold the I/O threads', () => {
  let server;
  let host;
  let hostUrl;
  before(async () => {
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
    ].join('\n');
    server = await startServer({ config });
  });
  after(async () => {
    host?.release();
    host?.server.close();
    if (server) assert.equal(await server.stop(), 0);
  });

  test('/health and embeddings answer while chats wait on the media host; then the chats complete', async () => {
    const order = [];
    const chats = Array.from({ length: NUM_CHATS }, (_, i) =>
      postJson(server, '/v1/chat/completions', {
        model: 'demo-vlm', max_tokens: 2,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: hostUrl } },
          { type: 'text', text: `Picture ${i}?` }] }],
      }).then((r) => { order.push('chat'); return r; }));
    await host.until(NUM_CHATS);  // every fetch is in flight, held by the host
    const fallback = setTimeout(() => host.release(), 30000);
    const health = fetch(server.url + '/health').then(async (r) => { order.push('health'); return r.status; });
    const embed = postJson(server, '/v1/embeddings', { model: 'demo-embed', input: 'a small request' })
      .then((r) => { order.push('embeddings'); return r; });
    assert.equal(await health, 200);
    const e = await embed;
    assert.equal(e.status, 200, e.text);
    assert.equal(e.body.data.length, 1);
    assert.deepEqual([...order].sort(), ['embeddings', 'health'], `a chat finished before the host answered: ${order}`);
    host.release();
    clearTimeout(fallback);
    for (const c of await Promise.all(chats)) {
      assert.equal(c.status, 200, c.text);
      assert.ok(c.body.usage.prompt_tokens_details.image_tokens > 0, c.text);
    }
    assert.deepEqual(order.slice(2), Array(NUM_CHATS).fill('chat'));
  });
});
