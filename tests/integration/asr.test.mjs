// Speech to text on the demo set's "demo-asr" (a tiny random Whisper: 32 tokens per chunk of
// English-looking babble with timestamps, so the checks are on shapes, times and consistency,
// never on words), through the official `openai` client: jfk.flac
// (../shared/testdata/audio) in every response_format (json, text, srt, vtt, verbose_json),
// translations, a streamed transcription (transcript.text.delta events, then
// transcript.text.done), bad requests as 400s naming the parameter, no head-of-line blocking
// (a 3-s file sent while a 10-min one is being decoded comes back first), and the
// prism_asr_* series on /metrics. The Realtime WebSocket is realtime.test.mjs's.
//
// Long audio: there is no FLAC decoder or ffmpeg CLI on the test side, so the 10-min and 3-s
// files are WAVs of synthetic speech (lib/speech_wav.mjs) that the built-in energy VAD calls
// speech. Same samples every run.
import { test, describe, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startServer, tempDir, metricValue, openaiError } from './lib/server.mjs';
import { importDep } from './lib/deps.mjs';
import { poll } from './lib/chat.mjs';
import { speech, wav } from './lib/speech_wav.mjs';

const openai = await importDep('openai');
const { default: OpenAI, toFile } = openai;

const MODEL = 'demo-asr';
const TESTDATA = process.env.PRISM_TESTDATA_DIR ?? '../../../shared/testdata';
const JFK = path.join(TESTDATA, 'audio', 'jfk.flac');
const JFK_SECONDS = 11.0;

// ---- helpers ---------------------------------------------------------------------------------

function clientOf(server) {
  return new OpenAI({ apiKey: 'sk-unused', baseURL: server.url + '/v1', maxRetries: 0, timeout: 240000 });
}

const jfk = () => fs.createReadStream(JFK);
const squeeze = (text) => text.replace(/\s+/g, '');  // joined texts differ in spacing only

async function metrics(server) {
  return (await fetch(server.url + '/metrics')).text();
}
const series = (text, name) => metricValue(text, name, { deployment: MODEL }) ?? 0;

// The client call fails with a 400 whose param is `param` and whose message matches `message`.
async function rejects400(promise, param, message) {
  await assert.rejects(promise, (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.status, 400);
    assert.equal(e.param, param, e.message);
    assert.match(e.message, message);
    return true;
  });
}

// srt: "00:00:01,500"; vtt: "00:01.500" or "00:00:01.500" → seconds.
function seconds(stamp) {
  const m = /^(?:(\d+):)?(\d{2}):(\d{2})[.,](\d{3})$/.exec(stamp);
  assert.ok(m, `not a cue time: ${stamp}`);
  return Number(m[1] ?? 0) * 3600 + Number(m[2]) * 60 + Number(m[3]) + Number(m[4]) / 1000;
}

// Cues of an srt or vtt body: [{start, end, text}], checking the syntax on the way.
function cues(body, kind) {
  const blocks = body.replace(/\r\n/g, '\n').trim().split(/\n\n+/);
  if (kind === 'vtt') assert.equal(blocks.shift().split('\n')[0], 'WEBVTT', body);
  return blocks.map((block, i) => {
    const lines = block.split('\n');
    if (kind === 'srt') assert.equal(lines.shift(), String(i + 1), `srt cue numbers count from 1:\n${body}`);
    const sep = kind === 'srt' ? /^(\d{2}:\d{2}:\d{2},\d{3}) --> (\d{2}:\d{2}:\d{2},\d{3})$/
      : /^((?:\d{2}:)?\d{2}:\d{2}\.\d{3}) --> ((?:\d{2}:)?\d{2}:\d{2}\.\d{3})$/;
    const m = sep.exec(lines.shift());
    assert.ok(m, `bad ${kind} timing line in:\n${block}`);
    assert.ok(lines.length >= 1 && lines.join('\n').trim().length > 0, `empty ${kind} cue:\n${block}`);
    return { start: seconds(m[1]), end: seconds(m[2]), text: lines.join('\n').trim() };
  });
}

// Times inside the audio, in order, each segment not ending before it starts.
function checkTimes(items, duration) {
  let last = 0;
  for (const s of items) {
    assert.ok(s.start >= 0 && s.end <= duration + 1e-6, `segment [${s.start}, ${s.end}] outside [0, ${duration}]`);
    assert.ok(s.start <= s.end, `segment [${s.start}, ${s.end}] ends before it starts`);
    assert.ok(s.start >= last - 1e-6, `segments out of order at ${s.start}`);
    last = s.start;
  }
}

// ---- tests ---------------------------------------------------------------------------------

const demoDir = tempDir();

describe('speech to text on demo-asr', () => {
  let server;
  let client;
  let verbose;  // jfk's verbose_json transcript, the reference of the other formats
  before(async () => {
    server = await startServer({ config: null, args: ['--demo-dir', demoDir] });
    client = clientOf(server);
    const ready = await poll(async () => (await fetch(server.url + '/ready')).status === 200, 60000);
    assert.ok(ready, `the demo set did not get ready:\n${server.logs()}`);
    verbose = await client.audio.transcriptions.create({ file: jfk(), model: MODEL, response_format: 'verbose_json' });
  });
  after(async () => { assert.equal(await server.stop(), 0); });

  test('/v1/models lists demo-asr with its task', async () => {
    const tasks = {};
    for await (const m of client.models.list()) tasks[m.id] = m.prism?.task;
    assert.equal(tasks[MODEL], 'transcribe');
  });

  test('verbose_json: English, the duration, segments with times inside the audio and their checks', async () => {
    const v = verbose;
    assert.equal(v.task, 'transcribe');
    assert.equal(v.language, 'english');  // detected: demo-asr always reads English
    assert.ok(Math.abs(v.duration - JFK_SECONDS) < 0.05, `duration ${v.duration}`);
    assert.ok(Array.isArray(v.segments) && v.segments.length >= 1, JSON.stringify(v));
    checkTimes(v.segments, JFK_SECONDS);
    v.segments.forEach((s, i) => {
      assert.equal(s.id, i);
      for (const k of ['seek', 'start', 'end', 'temperature', 'avg_logprob', 'compression_ratio', 'no_speech_prob'])
        assert.equal(typeof s[k], 'number', `segment.${k}: ${JSON.stringify(s)}`);
      assert.equal(typeof s.text, 'string');
      assert.ok(Array.isArray(s.tokens) && s.tokens.every(Number.isInteger), JSON.stringify(s));
      assert.ok(s.no_speech_prob >= 0 && s.no_speech_prob <= 1);
      assert.ok(s.compression_ratio > 0);
      assert.ok(s.avg_logprob <= 0);
      // demo-asr's greedy babble passes whisper's checks: decoded once, at temperature 0.
      assert.equal(s.temperature, 0, JSON.stringify(s));
      assert.ok(s.avg_logprob > -1 && s.compression_ratio < 2.4, JSON.stringify(s));
    });
    assert.ok(v.text.trim().length > 0);
    assert.equal(squeeze(v.text), squeeze(v.segments.map((s) => s.text).join('')), 'the text is the segments\' texts');
    assert.deepEqual(v.usage, { type: 'duration', seconds: Math.ceil(JFK_SECONDS) });
  });

  test('json and text: the same transcript (greedy), with the duration in usage', async () => {
    const j = await client.audio.transcriptions.create({ file: jfk(), model: MODEL });
    assert.deepEqual(Object.keys(j).sort(), ['text', 'usage']);
    assert.equal(j.text, verbose.text);
    assert.deepEqual(j.usage, { type: 'duration', seconds: Math.ceil(JFK_SECONDS) });
    const t = await client.audio.transcriptions.create({ file: jfk(), model: MODEL, response_format: 'text' });
    assert.equal(typeof t, 'string');
    assert.equal(t.trim(), verbose.text.trim());
  });

  test('srt and vtt: cue syntax, one cue per segment, the same times and texts', async () => {
    const srt = await client.audio.transcriptions.create({ file: jfk(), model: MODEL, response_format: 'srt' });
    const vtt = await client.audio.transcriptions.create({ file: jfk(), model: MODEL, response_format: 'vtt' });
    const spoken = verbose.segments.filter((s) => s.text.trim());
    for (const [body, kind] of [[srt, 'srt'], [vtt, 'vtt']]) {
      assert.equal(typeof body, 'string');
      const c = cues(body, kind);
      assert.equal(c.length, spoken.length, body);
      checkTimes(c, JFK_SECONDS);
      c.forEach((cue, i) => {
        assert.ok(Math.abs(cue.start - spoken[i].start) <= 0.0015, `${kind} cue ${i}: ${cue.start} vs ${spoken[i].start}`);
        assert.ok(Math.abs(cue.end - spoken[i].end) <= 0.0015, `${kind} cue ${i}: ${cue.end} vs ${spoken[i].end}`);
        assert.equal(cue.text, spoken[i].text.trim());
      });
    }
  });

  test('a given language and a prompt are accepted; timestamp_granularities segment', async () => {
    const v = await client.audio.transcriptions.create({
      file: jfk(), model: MODEL, language: 'en', prompt: 'The river near the school.', response_format: 'verbose_json',
      timestamp_granularities: ['segment'],
    });
    assert.equal(v.language, 'english');
    assert.ok(v.segments.length >= 1);
    checkTimes(v.segments, JFK_SECONDS);
    await rejects400(client.audio.transcriptions.create({
      file: jfk(), model: MODEL, response_format: 'verbose_json', timestamp_granularities: ['word'],
    }), 'timestamp_granularities[]', /word/);
  });

  test('translations: the translate task, English out, in json, text and verbose_json', async () => {
    const t = await client.audio.translations.create({ file: jfk(), model: MODEL });
    assert.equal(typeof t.text, 'string');
    assert.ok(t.text.trim().length > 0);
    assert.notEqual(t.text, verbose.text, 'the task token changes the decode');
    const v = await client.audio.translations.create({ file: jfk(), model: MODEL, response_format: 'verbose_json' });
    assert.equal(v.task, 'translate');
    assert.equal(v.language, 'english');
    assert.equal(v.text, t.text);
    checkTimes(v.segments, JFK_SECONDS);
    const text = await client.audio.translations.create({ file: jfk(), model: MODEL, response_format: 'text' });
    assert.equal(text.trim(), t.text.trim());
  });

  test('stream=true: transcript.text.delta events in order, then transcript.text.done', async () => {
    const stream = await client.audio.transcriptions.create({ file: jfk(), model: MODEL, stream: true });
    const types = [];
    let deltas = '';
    let done;
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'transcript.text.delta') deltas += event.delta;
      if (event.type === 'transcript.text.done') done = event;
    }
    assert.ok(types.length >= 2, types.join());
    assert.ok(types.slice(0, -1).every((t) => t === 'transcript.text.delta'), types.join());
    assert.equal(types.at(-1), 'transcript.text.done');
    assert.equal(done.text, verbose.text);
    assert.equal(squeeze(deltas), squeeze(done.text));

    // On the wire: an event stream of data lines ending with [DONE].
    const form = new FormData();
    form.append('file', new Blob([fs.readFileSync(JFK)]), 'jfk.flac');
    form.append('model', MODEL);
    form.append('stream', 'true');
    const r = await fetch(server.url + '/v1/audio/transcriptions', { method: 'POST', body: form });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /^text\/event-stream/);
    const events = (await r.text()).split('\n\n').filter((e) => e.trim());
    assert.equal(events.at(-1), 'data: [DONE]');
    const last = JSON.parse(events.at(-2).replace(/^data: /, ''));
    assert.equal(last.type, 'transcript.text.done');
    assert.equal(last.text, verbose.text);
  });

  test('bad requests: 400 naming the parameter', async () => {
    // Not audio, and a truncated FLAC.
    await rejects400(client.audio.transcriptions.create({
      file: await toFile(Buffer.from('this is not audio at all, just text'), 'notes.wav'), model: MODEL,
    }), 'file', /audio|corrupt|decode/i);
    const flac = fs.readFileSync(JFK);
    await rejects400(client.audio.transcriptions.create({
      file: await toFile(flac.subarray(0, 2000), 'cut.flac'), model: MODEL,
    }), 'file', /corrupt|audio|decode/i);
    await rejects400(client.audio.transcriptions.create({
      file: await toFile(Buffer.alloc(0), 'empty.wav'), model: MODEL,
    }), 'file', /empty/i);
    await rejects400(client.audio.transcriptions.create({ file: jfk(), model: MODEL, response_format: 'xml' }),
      'response_format', /xml|response_format/);
    await rejects400(client.audio.transcriptions.create({ file: jfk(), model: MODEL, language: 'xx' }),
      'language', /xx/);
    await rejects400(client.audio.transcriptions.create({ file: jfk(), model: MODEL, temperature: 3 }),
      'temperature', /temperature/);
    await rejects400(client.audio.transcriptions.create({ file: jfk(), model: 'demo-chat' }), 'model', /demo-chat|transcri/);
    // No file at all (the SDK always sends one: a plain form).
    const form = new FormData();
    form.append('model', MODEL);
    const r = await fetch(server.url + '/v1/audio/transcriptions', { method: 'POST', body: form });
    assert.equal(r.status, 400);
    const e = openaiError(await r.text());
    assert.equal(e.param, 'file');
    assert.equal(e.type, 'invalid_request_error');
  });

  test('no head-of-line blocking: a 3-s file sent during a 10-min one comes back first', async () => {
    const long = wav(speech(600, 11));
    const short = wav(speech(3, 12));
    assert.ok(long.length > 19e6 && long.length < 32 << 20, `${long.length} bytes`);
    const tokens0 = series(await metrics(server), 'prism_generate_generation_tokens_total');
    const order = [];
    const longDone = client.audio.transcriptions.create({ file: await toFile(long, 'long.wav'), model: MODEL,
      response_format: 'verbose_json' }).then((v) => { order.push('long'); return v; });
    // Wait until the long file's chunks are decoding (tokens generated), then send the short one.
    const decoding = await poll(async () => series(await metrics(server), 'prism_generate_generation_tokens_total') > tokens0, 120000);
    assert.ok(decoding, 'the 10-min file never started decoding');
    const shortDone = client.audio.transcriptions.create({ file: await toFile(short, 'short.wav'), model: MODEL,
      response_format: 'verbose_json' }).then((v) => { order.push('short'); return v; });
    const [l, s] = await Promise.all([longDone, shortDone]);
    assert.deepEqual(order, ['short', 'long'], 'the 3-s file waited behind the 10-min one');
    // Both are whole transcripts of their audio.
    assert.ok(Math.abs(l.duration - 600) < 0.05, `duration ${l.duration}`);
    assert.ok(Math.abs(s.duration - 3) < 0.05, `duration ${s.duration}`);
    checkTimes(l.segments, 600);
    checkTimes(s.segments, 3);
    assert.ok(l.segments.length > s.segments.length);
    // More chunks than demo-asr's batch (max_batch_size 8): the long file's chunks queue.
    assert.ok(l.prism.chunks > 8, `${l.prism.chunks} chunks`);
    assert.equal(s.prism.chunks, 1);
    assert.ok(l.segments.at(-1).end > 500, `the last segment ends at ${l.segments.at(-1).end}`);
  });

  test('/metrics: the prism_asr_* series of demo-asr', async () => {
    const text = await metrics(server);
    assert.ok(series(text, 'prism_asr_audio_seconds_total') >= 4 * JFK_SECONDS, text);
    assert.ok(series(text, 'prism_asr_speech_seconds_total') > 0);
    assert.ok(series(text, 'prism_asr_speech_seconds_total') <= series(text, 'prism_asr_audio_seconds_total'));
    assert.ok(series(text, 'prism_asr_chunks_total') >= 4);
    assert.ok(metricValue(text, 'prism_asr_rerun_chunks_total', { deployment: MODEL }) !== undefined, 'rerun series');
    assert.ok(series(text, 'prism_asr_real_time_factor_count') >= 4);
    assert.ok(series(text, 'prism_asr_real_time_factor_sum') > 0);
    assert.ok(series(text, 'prism_asr_chunk_latency_seconds_count') >= 4);
    assert.ok(series(text, 'prism_asr_speech_ratio_count') >= 4);
    assert.ok(metricValue(text, 'prism_asr_live_streams', { deployment: MODEL }) !== undefined, 'live streams gauge');
    assert.match(text, /prism_asr_audio_seconds_total\{[^}]*modality="asr"/);
  });
});
