// Live transcription over WebSocket against the real server, on the demo set's "demo-asr" (a
// tiny random Whisper: its transcripts are babble, so the checks are on the protocol, never
// on words). The audio is synthesized here as PCM16 at 24 kHz (OpenAI's rate): "speech" made
// of voiced syllables (a falling pitch with harmonics shaped by two formants, raised-cosine
// envelopes) grouped into words and utterances, separated by silence, which the built-in
// energy VAD treats as speech — no decoder is needed on the test side (there is no FLAC
// decoder or ffmpeg CLI here), and the samples are the same on every run.
// Checked: a Realtime transcription session (npm `ws`) from transcription_session.update to
// speech_started / speech_stopped / committed / deltas / completed for every item; bad events
// get error events and the session goes on; a stalled stream is closed (1008) while a
// concurrent one finishes normally; refusals at connect; the binary mode; the live metrics.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import fs from 'node:fs';
import { runPrism, startServer, tempDir, json, metricValue } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';

const { default: WebSocket } = await importDep('ws');

const MODEL = 'asr';
const STALL_SECONDS = 3;
let server;

before(async () => {
  const demo = tempDir();
  const init = await runPrism(['demo', 'init', demo], { timeoutMs: 120000 });
  assert.equal(init.code, 0, `prism demo init failed:\n${init.stdout}${init.stderr}`);
  const model = path.join(demo, 'demo-asr');
  assert.ok(fs.existsSync(path.join(model, 'config.json')),
    'the demo set has no demo-asr (tools/demo/demo.cpp must list it): this test serves it');
  server = await startServer({
    config: `
[server]
host = "127.0.0.1"
port = 8080
[server.limits]
idle_timeout_ms = 10000
max_body_bytes = 4194304

[[deployment]]
name = "${MODEL}"
task = "transcribe"
model = ${JSON.stringify(model)}
[deployment.knobs]
kv_cache_bytes = 8388608
vad = "energy"
live_stall_seconds = ${STALL_SECONDS}
live_partial_ms = 200
[deployment.batching]
max_batch_size = 8

[[deployment]]
name = "echo"
task = "echo"
`,
  });
});
after(async () => { if (server) assert.equal(await server.stop(), 0); });

// ---- synthetic speech ----------------------------------------------------------------------------

const RATE = 24000;

function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// One voiced syllable: f0 falling from f0 to 0.85·f0, 16 harmonics weighted by two formant
// bumps, a raised-cosine envelope.
function syllable(seconds, f0, f1, f2, amp) {
  const n = Math.round(seconds * RATE);
  const out = new Float32Array(n);
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const t = i / n;
    const f = f0 * (1 - 0.15 * t);
    phase += (2 * Math.PI * f) / RATE;
    let v = 0;
    for (let h = 1; h <= 16; h++) {
      const fh = h * f;
      if (fh > 5000) break;
      const w = Math.exp(-(((fh - f1) / 300) ** 2)) + 0.6 * Math.exp(-(((fh - f2) / 400) ** 2)) + 0.05;
      v += w * Math.sin(h * phase);
    }
    out[i] = amp * v * 0.5 * (1 - Math.cos(2 * Math.PI * t));
  }
  return out;
}

// Float samples of: for each utterance length (seconds) a run of words, separated by `gap`
// seconds of near-silence; leading and trailing silence.
function speech(utterances, { gap = 1.5, lead = 0.6, tail = 1.5, seed = 7 } = {}) {
  const r = rng(seed);
  const parts = [new Float32Array(Math.round(lead * RATE))];
  utterances.forEach((length, k) => {
    if (k > 0) parts.push(new Float32Array(Math.round(gap * RATE)));
    let t = 0;
    while (t < length) {
      const syllables = 1 + Math.floor(r() * 3);
      for (let s = 0; s < syllables; s++) {
        const d = 0.12 + r() * 0.1;
        parts.push(syllable(d, 110 + r() * 70, 500 + r() * 400, 1200 + r() * 900, 0.08));
        t += d;
      }
      const pause = 0.05 + r() * 0.06;
      parts.push(new Float32Array(Math.round(pause * RATE)));
      t += pause;
    }
  });
  parts.push(new Float32Array(Math.round(tail * RATE)));
  const total = parts.reduce((a, p) => a + p.length, 0);
  const out = new Float32Array(total);
  let o = 0;
  for (const p of parts) { out.set(p, o); o += p.length; }
  const noise = rng(seed + 1);
  for (let i = 0; i < out.length; i++) out[i] += (noise() - 0.5) * 2e-4;  // a faint floor
  return out;
}

function pcm16(samples) {
  const b = Buffer.alloc(samples.length * 2);
  for (let i = 0; i < samples.length; i++) b.writeInt16LE(Math.max(-32768, Math.min(32767, Math.round(samples[i] * 32767))), i * 2);
  return b;
}

const chunks = (buf, bytes) => { const out = []; for (let i = 0; i < buf.length; i += bytes) out.push(buf.subarray(i, i + bytes)); return out; };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---- a client ----------------------------------------------------------------------------------

function connect(query) {
  const ws = new WebSocket(`ws://${server.host}:${server.port}${query}`);
  const events = [];
  const waiters = [];
  ws.on('message', (data, binary) => {
    const e = binary ? { binary: true, data } : json(data.toString());
    events.push(e);
    for (const w of [...waiters]) w();
  });
  const closed = new Promise((resolve) => ws.on('close', (code, reason) => { resolve({ code, reason: reason.toString() }); for (const w of [...waiters]) w(); }));
  const opened = new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
  // Resolves with the events once pred(events) holds; rejects after `ms` (a hung test's deadline).
  const until = (pred, ms = 60000) => new Promise((resolve, reject) => {
    const check = () => {
      if (pred(events)) { waiters.splice(waiters.indexOf(check), 1); clearTimeout(t); resolve(events); }
    };
    const t = setTimeout(() => { waiters.splice(waiters.indexOf(check), 1); reject(new Error(`timed out; events: ${JSON.stringify(events.map((e) => e.type ?? e))}`)); }, ms);
    waiters.push(check);
    check();
  });
  const send = (event) => ws.send(JSON.stringify(event));
  return { ws, events, closed, opened, until, send };
}

const ofType = (events, type) => events.filter((e) => e.type === type);

// Appends `audio` (PCM16 bytes) in 200 ms events at about four times real time, then keeps
// streaming silence (as a live microphone does) until `done()`.
async function stream(c, audio, done, { rate = RATE } = {}) {
  const bytes = (rate / 5) * 2;
  for (const piece of chunks(audio, bytes)) {
    c.send({ type: 'input_audio_buffer.append', audio: piece.toString('base64') });
    await sleep(50);
  }
  const quiet = pcm16(new Float32Array(rate / 5)).toString('base64');
  while (!done() && c.ws.readyState === WebSocket.OPEN) {
    c.send({ type: 'input_audio_buffer.append', audio: quiet });
    await sleep(100);
  }
}

// ---- tests ---------------------------------------------------------------------------------------

test('a Realtime transcription session: speech events, deltas and a completed transcript per item', async () => {
  const c = connect('/v1/realtime?intent=transcription');
  await c.opened;
  const [created] = await c.until((ev) => ev.length >= 1);
  assert.equal(created.type, 'transcription_session.created');
  assert.equal(created.session.object, 'realtime.transcription_session');
  assert.equal(created.session.input_audio_transcription.model, null);

  c.send({
    type: 'transcription_session.update',
    event_id: 'cfg1',
    session: {
      input_audio_format: 'pcm16',
      input_audio_transcription: { model: MODEL, language: 'en' },
      turn_detection: { type: 'server_vad', threshold: 0.5, prefix_padding_ms: 100, silence_duration_ms: 500 },
    },
  });
  const updated = (await c.until((ev) => ofType(ev, 'transcription_session.updated').length === 1 || ofType(ev, 'error').length))
    .find((e) => e.type === 'transcription_session.updated' || e.type === 'error');
  assert.equal(updated.type, 'transcription_session.updated', JSON.stringify(updated));
  assert.equal(updated.session.input_audio_transcription.model, MODEL);
  assert.equal(updated.session.input_audio_transcription.language, 'en');
  assert.equal(updated.session.turn_detection.silence_duration_ms, 500);

  // Two utterances (3 s and 2.5 s) with 1.5 s of silence around them.
  const audio = pcm16(speech([3.0, 2.5]));
  const allDone = (ev) => {
    const committed = ofType(ev, 'input_audio_buffer.committed').length;
    return committed >= 2 && ofType(ev, 'conversation.item.input_audio_transcription.completed').length >= committed;
  };
  await stream(c, audio, () => allDone(c.events));
  await c.until(allDone);

  const ev = c.events;
  assert.equal(ofType(ev, 'error').length, 0, JSON.stringify(ofType(ev, 'error')));
  const started = ofType(ev, 'input_audio_buffer.speech_started');
  const stopped = ofType(ev, 'input_audio_buffer.speech_stopped');
  const committed = ofType(ev, 'input_audio_buffer.committed');
  const completed = ofType(ev, 'conversation.item.input_audio_transcription.completed');
  assert.ok(started.length >= 2, `speech_started events: ${started.length}`);
  assert.ok(stopped.length >= 2);
  // The first speech starts after the 0.6 s lead-in (less the padding), the last item ends
  // before the audio does.
  assert.ok(started[0].audio_start_ms >= 400 && started[0].audio_start_ms < 1200, JSON.stringify(started[0]));
  const audioMs = (audio.length / 2 / RATE) * 1000;
  assert.ok(stopped.at(-1).audio_end_ms <= audioMs);

  // Per item: started < deltas < stopped < committed < completed; ids chain.
  const index = (e) => ev.indexOf(e);
  let previous = null;
  for (const s of started) {
    const id = s.item_id;
    const stop = stopped.find((e) => e.item_id === id);
    const commit = committed.find((e) => e.item_id === id);
    const done = completed.find((e) => e.item_id === id);
    assert.ok(stop && commit && done, `item ${id} lacks events`);
    assert.ok(index(s) < index(stop) && index(stop) < index(commit) && index(commit) < index(done));
    assert.ok(stop.audio_end_ms > s.audio_start_ms);
    assert.equal(commit.previous_item_id, previous);
    previous = id;
    assert.equal(done.content_index, 0);
    assert.equal(typeof done.transcript, 'string');
    for (const d of ofType(ev, 'conversation.item.input_audio_transcription.delta').filter((e) => e.item_id === id)) {
      assert.ok(index(d) > index(s) && index(d) < index(done));
      assert.equal(d.content_index, 0);
      assert.ok(d.delta.length > 0);
    }
  }
  assert.ok(completed.some((e) => e.transcript.length > 0), 'every transcript is empty');
  assert.ok(ofType(ev, 'conversation.item.input_audio_transcription.delta').length >= 1, 'no delta at all');
  assert.ok(ofType(ev, 'conversation.item.created').length >= 2);
  const ids = ev.map((e) => e.event_id);
  assert.equal(new Set(ids).size, ids.length, 'event ids are unique');
  c.ws.close(1000);
  assert.equal((await c.closed).code, 1000);
});

test('bad events get error events; the session goes on and still transcribes', async () => {
  const c = connect(`/v1/realtime?intent=transcription&model=${MODEL}`);
  await c.opened;
  await c.until((ev) => ev.length >= 1);
  const bad = [
    ['{not json', 'invalid_json'],
    [JSON.stringify({ type: 'input_audio_buffer.sing', event_id: 'b1' }), 'invalid_value'],
    [JSON.stringify({ type: 'response.create', event_id: 'b2' }), 'unsupported_event'],
    [JSON.stringify({ type: 'input_audio_buffer.append', audio: '@@@@', event_id: 'b3' }), 'invalid_base64'],
    [JSON.stringify({ type: 'input_audio_buffer.append', audio: Buffer.from([1, 2, 3]).toString('base64'), event_id: 'b4' }), 'invalid_value'],
    [JSON.stringify({ type: 'transcription_session.update', session: { input_audio_format: 'g711_ulaw' }, event_id: 'b5' }), 'unsupported_format'],
    [JSON.stringify({ type: 'input_audio_buffer.commit', event_id: 'b6' }), 'input_audio_buffer_commit_empty'],
  ];
  for (const [message, code] of bad) {
    const before = ofType(c.events, 'error').length;
    c.ws.send(message);
    const errors = ofType(await c.until((ev) => ofType(ev, 'error').length > before), 'error');
    const e = errors.at(-1);
    assert.equal(e.error.code, code, `${message} → ${JSON.stringify(e)}`);
    assert.equal(e.error.type, 'invalid_request_error');
    const sent = json(message);
    if (sent?.event_id) assert.equal(e.error.event_id, sent.event_id);
  }
  c.ws.send(Buffer.from([0, 1, 2, 3]));  // a binary frame: not the Realtime protocol
  await c.until((ev) => ofType(ev, 'error').length === bad.length + 1);
  assert.equal(ofType(c.events, 'error').at(-1).error.code, 'invalid_message');

  // Still open: turn detection off, 1.5 s of speech, commit: one item, transcribed.
  c.send({ type: 'transcription_session.update', session: { turn_detection: null } });
  await c.until((ev) => ofType(ev, 'transcription_session.updated').length === 1);
  const audio = pcm16(speech([1.5], { lead: 0.2, tail: 0.2, seed: 11 }));
  for (const piece of chunks(audio, 9600)) c.send({ type: 'input_audio_buffer.append', audio: piece.toString('base64') });
  c.send({ type: 'input_audio_buffer.commit', event_id: 'k' });
  // A live client keeps streaming (the stream would stall otherwise); without VAD the silence
  // only fills the next, uncommitted item.
  const completedOne = (e) => ofType(e, 'conversation.item.input_audio_transcription.completed').length === 1;
  await stream(c, Buffer.alloc(0), () => completedOne(c.events));
  const ev = await c.until(completedOne);
  assert.equal(ofType(ev, 'input_audio_buffer.speech_started').length, 0);  // no VAD: no speech events
  assert.equal(ofType(ev, 'input_audio_buffer.committed').length, 1);
  assert.equal(ofType(ev, 'error').length, bad.length + 1);
  c.ws.close();
  await c.closed;
});

test('a stalled stream is closed with an error; a concurrent stream is unaffected', async () => {
  const stalled = connect(`/v1/realtime?intent=transcription&model=${MODEL}`);
  const live = connect(`/v1/realtime?intent=transcription&model=${MODEL}`);
  await Promise.all([stalled.opened, live.opened]);
  const quiet = pcm16(new Float32Array(RATE / 5)).toString('base64');
  stalled.send({ type: 'input_audio_buffer.append', audio: quiet });  // then nothing

  const audio = pcm16(speech([2.0, 1.5], { gap: 1.0, seed: 3 }));
  const finished = (ev) => ofType(ev, 'input_audio_buffer.committed').length >= 2 &&
    ofType(ev, 'conversation.item.input_audio_transcription.completed').length >= 2;
  // The live client streams (real time / 2) for longer than the stall limit.
  const bytes = (RATE / 5) * 2;
  const t0 = Date.now();
  for (const piece of chunks(audio, bytes)) {
    live.send({ type: 'input_audio_buffer.append', audio: piece.toString('base64') });
    await sleep(100);
  }
  while ((!finished(live.events) || Date.now() - t0 < (STALL_SECONDS + 1) * 1000) && live.ws.readyState === WebSocket.OPEN) {
    live.send({ type: 'input_audio_buffer.append', audio: quiet });
    await sleep(100);
  }
  const closed = await stalled.closed;
  assert.equal(closed.code, 1008);
  const err = ofType(stalled.events, 'error').at(-1);
  assert.equal(err?.error.code, 'input_audio_stalled', JSON.stringify(stalled.events));

  await live.until(finished);
  assert.equal(ofType(live.events, 'error').length, 0, JSON.stringify(ofType(live.events, 'error')));
  assert.equal(live.ws.readyState, WebSocket.OPEN);
  live.ws.close();
  await live.closed;
});

test('refusals at connect: unknown model, a model of another task, another intent', async () => {
  for (const [query, code] of [
    ['/v1/realtime?intent=transcription&model=nope', 'model_not_found'],
    ['/v1/realtime?intent=transcription&model=echo', 'invalid_value'],
    ['/v1/realtime?intent=conversation&model=asr', 'invalid_value'],
    ['/v1/audio/stream', 'invalid_value'],
  ]) {
    const c = connect(query);
    await c.opened;
    const closed = await c.closed;
    assert.equal(closed.code, 1008, query);
    assert.equal(c.events[0]?.type, 'error', query);
    assert.equal(c.events[0].error.code, code, `${query}: ${JSON.stringify(c.events[0])}`);
  }
});

test('binary mode: raw PCM16 frames in, partial and final JSON out', async () => {
  const c = connect(`/v1/audio/stream?model=${MODEL}&sample_rate=16000&language=en`);
  await c.opened;
  // 16 kHz: the synthetic speech at 24 kHz, decimated by 3/2 (nearest sample: fine for a VAD).
  const s24 = speech([2.0], { seed: 5 });
  const s16 = new Float32Array(Math.floor((s24.length * 2) / 3));
  for (let i = 0; i < s16.length; i++) s16[i] = s24[Math.floor((i * 3) / 2)];
  const audio = pcm16(s16);
  for (const piece of chunks(audio, 6400)) { c.ws.send(piece); await sleep(50); }
  c.ws.send(Buffer.from([1, 2, 3]));  // an odd byte count: an error message, the stream goes on
  const quiet = pcm16(new Float32Array(3200));
  while (!c.events.some((e) => e.type === 'final') && c.ws.readyState === WebSocket.OPEN) { c.ws.send(quiet); await sleep(100); }
  const ev = await c.until((e) => e.some((x) => x.type === 'final') && e.some((x) => x.type === 'error'));
  const final = ev.find((e) => e.type === 'final');
  assert.equal(typeof final.text, 'string');
  assert.equal(final.item, 0);
  assert.ok(final.end > final.start && final.start >= 0.3, JSON.stringify(final));
  assert.ok(Array.isArray(final.segments));
  for (const s of final.segments) assert.ok(s.start >= final.start - 1e-6 && s.end <= final.end + 1e-6);
  for (const p of ev.filter((e) => e.type === 'partial')) {
    assert.equal(p.item, 0);
    assert.ok(p.end > p.start && typeof p.text === 'string');
  }
  const errors = ev.filter((e) => e.type === 'error');
  assert.equal(errors.length, 1);
  assert.equal(errors[0].error.code, 'invalid_audio');
  c.ws.close();
  await c.closed;
});

test('/metrics counts live streams and partial latency', async () => {
  const c = connect(`/v1/realtime?intent=transcription&model=${MODEL}`);
  await c.opened;
  await c.until((ev) => ev.length >= 1);
  const scrape = async () => (await fetch(`${server.url}/metrics`)).text();
  assert.equal(metricValue(await scrape(), 'prism_asr_live_streams', { deployment: MODEL }), 1);
  c.ws.close();
  await c.closed;
  let text = await scrape();
  // The server sees the close a moment after the client: wait for the gauge (a deadline, not a timing check).
  for (let i = 0; i < 100 && metricValue(text, 'prism_asr_live_streams', { deployment: MODEL }) !== 0; i++) {
    await sleep(50);
    text = await scrape();
  }
  assert.equal(metricValue(text, 'prism_asr_live_streams', { deployment: MODEL }), 0);
  assert.ok(metricValue(text, 'prism_asr_live_partial_latency_seconds_count', { deployment: MODEL }) > 0);
});
