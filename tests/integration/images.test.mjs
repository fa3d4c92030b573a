// Text to image on the demo set's "demo-image" (a tiny random Z-Image pipeline: its images are
// coloured noise, so the checks are on sizes, counts, formats and determinism, never on
// content), through the official `openai` client: images.generate with b64_json PNGs of the
// asked size, n images (from seeds s, s + 1: the same seed gives the same bytes), streaming
// with partial_images (the SDK's stream of image_generation.partial_image events, then one
// image_generation.completed per image), a bad size as a 400 naming `size`, and the
// prism_denoise_* series on /metrics.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, tempDir, metricValue } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';

const openai = await importDep('openai');
const { default: OpenAI } = openai;

const MODEL = 'demo-image';
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

function clientOf(server) {
  return new OpenAI({ apiKey: 'sk-unused', baseURL: server.url + '/v1', maxRetries: 0, timeout: 240000 });
}

// A PNG's width and height from its IHDR chunk (the first one after the signature).
function pngSize(b64) {
  const buf = Buffer.from(b64, 'base64');
  assert.ok(buf.subarray(0, 8).equals(PNG_SIGNATURE), 'not a PNG');
  assert.equal(buf.subarray(12, 16).toString('ascii'), 'IHDR');
  return { width: buf.readUInt32BE(16), height: buf.readUInt32BE(20) };
}

describe('images on demo-image', () => {
  const demoDir = tempDir();
  let server;
  let client;

  before(async () => {
    server = await startServer({ config: null, args: ['--demo-dir', demoDir] });
    client = clientOf(server);
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  test('/v1/models lists demo-image with task image', async () => {
    const tasks = {};
    for await (const m of client.models.list()) tasks[m.id] = m.prism?.task;
    assert.equal(tasks[MODEL], 'image');
  });

  test('images.generate: a b64_json PNG of the asked size', async () => {
    const r = await client.images.generate({ model: MODEL, prompt: 'a red fox', size: '64x48', response_format: 'b64_json' });
    assert.equal(r.data.length, 1);
    assert.deepEqual(pngSize(r.data[0].b64_json), { width: 64, height: 48 });
    assert.equal(r.size, '64x48');
    assert.equal(r.output_format, 'png');
    assert.equal(r.prism.steps, 8);                        // the demo's default_steps
    assert.deepEqual(r.prism.model_passes, { cond: 8, uncond: 0 });
  });

  test('the default size is the deployment\'s (512 x 512 for the demo)', async () => {
    const r = await client.images.generate({ model: MODEL, prompt: 'a red fox', prism: { steps: 1 } });
    assert.deepEqual(pngSize(r.data[0].b64_json), { width: 512, height: 512 });
  });

  test('n images from seeds s, s + 1: each equals the single image of its seed', async () => {
    const ask = (n, seed) => client.images.generate({
      model: MODEL, prompt: 'a red fox', size: '32x32', n, prism: { seed, steps: 2 } });
    const both = await ask(2, 7);
    assert.equal(both.data.length, 2);
    assert.notEqual(both.data[0].b64_json, both.data[1].b64_json);
    const [a, b] = await Promise.all([ask(1, 7), ask(1, 8)]);
    assert.equal(a.data[0].b64_json, both.data[0].b64_json);
    assert.equal(b.data[0].b64_json, both.data[1].b64_json);
    assert.equal(both.prism.seed, 7);
  });

  test('streaming with partial_images: the previews, then one completed event per image', async () => {
    const stream = await client.images.generate({
      model: MODEL, prompt: 'a red fox', size: '48x32', n: 2, stream: true, partial_images: 2, prism: { steps: 4 } });
    const partial = [];
    const completed = [];
    for await (const event of stream) {
      if (event.type === 'image_generation.partial_image') partial.push(event);
      else if (event.type === 'image_generation.completed') completed.push(event);
      else assert.fail(`unexpected event ${event.type}`);
    }
    assert.equal(completed.length, 2);
    assert.equal(partial.length, 4);  // partial_images per image
    for (const e of [...partial, ...completed]) assert.deepEqual(pngSize(e.b64_json), { width: 48, height: 32 });
    assert.deepEqual(partial.map((e) => e.partial_image_index).sort(), [0, 0, 1, 1]);
    for (const e of completed) assert.equal(e.size, '48x32');
  });

  test('a size the model cannot take is a 400 naming size', async () => {
    await assert.rejects(client.images.generate({ model: MODEL, prompt: 'a red fox', size: '100x100' }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.param, 'size', e.message);
      assert.match(e.message, /multiples of 16/);
      return true;
    });
    await assert.rejects(client.images.generate({ model: MODEL, prompt: 'a red fox', size: '1024x1024' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'size' && /at most 512/.test(e.message));
  });

  test('/metrics counts the denoising steps and passes', async () => {
    const text = await (await fetch(server.url + '/metrics')).text();
    const steps = metricValue(text, 'prism_denoise_steps_total', { deployment: MODEL });
    const cond = metricValue(text, 'prism_denoise_model_passes_total', { deployment: MODEL, pass: 'cond' });
    assert.ok(steps > 0, `prism_denoise_steps_total ${steps}`);
    assert.equal(cond, steps);  // no guidance: one conditional pass per image step
  });
});
