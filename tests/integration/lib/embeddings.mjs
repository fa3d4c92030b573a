// Helpers of the embeddings integration tests: tiny checkpoints of every BERT-family layout
// from the PyTorch generator (tests/reference/bert_family.py), a small safetensors reader for
// their reference.safetensors, `prism tokenize` as a function, and vector arithmetic.
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PRISM_BIN } from './server.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REFERENCE_DIR = path.resolve(HERE, '..', '..', 'reference');
export const PYTHON = process.env.PRISM_PYTHON || '/usr/bin/python3';

// The layouts bert_family.py writes (issue 5's families).
export const LAYOUTS = ['bert', 'minilm', 'bge', 'e5', 'gte', 'xlmr'];

// Writes the tiny checkpoint of `layout` (and its reference.safetensors) into dir.
export function generateLayout(layout, dir) {
  return new Promise((resolve, reject) => {
    execFile(PYTHON, [path.join(REFERENCE_DIR, 'bert_family.py'), '--layout', layout, '--out', dir],
      { timeout: 240000, maxBuffer: 1 << 22 }, (err, stdout, stderr) => {
        if (err) reject(new Error(`bert_family.py --layout ${layout} failed (${err.code ?? err.signal}):\n${stdout}${stderr}`));
        else resolve(dir);
      });
  });
}

const DTYPES = { F32: Float32Array, F64: Float64Array, I32: Int32Array, I64: BigInt64Array, U8: Uint8Array, I8: Int8Array };

// {name: {dtype, shape, data}} of a .safetensors file (data: a typed array, a copy).
export function readSafetensors(file) {
  const bytes = fs.readFileSync(file);
  const headerLen = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLen).toString('utf8'));
  const base = 8 + headerLen;
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const Type = DTYPES[t.dtype];
    if (!Type) throw new Error(`${file}: tensor ${name} has dtype ${t.dtype}, which this reader does not know`);
    const [begin, end] = t.data_offsets;
    const raw = bytes.subarray(base + begin, base + end);
    const copy = new Uint8Array(raw.length);  // aligned for the typed array
    copy.set(raw);
    out[name] = { dtype: t.dtype, shape: t.shape, data: new Type(copy.buffer, 0, raw.length / Type.BYTES_PER_ELEMENT) };
  }
  return out;
}

// The reference of a generated layout: its token sequences and their expected embeddings.
export function readReference(dir) {
  const t = readSafetensors(path.join(dir, 'reference.safetensors'));
  const ids = Array.from(t.token_ids.data);
  const cu = Array.from(t.cu_seqlens.data);
  const [rows, dims] = t.embeddings.shape;
  const sequences = [];
  const embeddings = [];
  for (let s = 0; s < rows; s++) {
    sequences.push(ids.slice(cu[s], cu[s + 1]));
    embeddings.push(Array.from(t.embeddings.data.subarray(s * dims, (s + 1) * dims)));
  }
  return { sequences, embeddings, dims };
}

// `prism tokenize --model DIR` on text: the ids, special tokens included.
export function tokenize(dir, text) {
  return new Promise((resolve, reject) => {
    const proc = spawn(PRISM_BIN, ['tokenize', '--model', dir], { env: { ...process.env, PRISM_THREADS: '1' } });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => { out += d; });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      if (code !== 0) reject(new Error(`prism tokenize --model ${dir} exited ${code}: ${err}`));
      else resolve(out.trim().split(/\s+/).filter((s) => s).map(Number));
    });
    proc.stdin.end(text);
  });
}

export function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

// max |a - b| / max |b|: the parity tests' measure.
export function maxRelError(a, b) {
  if (a.length !== b.length) return Infinity;
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < a.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return diff / scale;
}

// A base64 embedding (OpenAI's encoding_format "base64": little-endian float32) as numbers.
export function decodeBase64Floats(text) {
  const buf = Buffer.from(text, 'base64');
  const copy = new Uint8Array(buf.length);
  copy.set(buf);
  return Array.from(new Float32Array(copy.buffer));
}
