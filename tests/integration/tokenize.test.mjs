// `prism tokenize`: ids of stdin on one line, --no-special, --decode (the text, then a
// newline), invalid UTF-8 handled like Hugging Face (replacement character, never a crash),
// and clear errors with exit 1.
// Uses the real vocabularies in ../shared/testdata/tokenizers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { PRISM_BIN } from './lib/server.mjs';

const TOKENIZERS = path.join(process.env.PRISM_TESTDATA_DIR ?? '../../../shared/testdata', 'tokenizers');

// Runs prism with `input` (string or Buffer) on stdin.
function prism(args, input) {
  return new Promise((resolve) => {
    const proc = spawn(PRISM_BIN, args, { env: { ...process.env, PRISM_THREADS: '1' } });
    let stdout = '', stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    proc.on('close', (code) => resolve({ code, stdout, stderr }));
    proc.stdin.end(input);
  });
}

test('BERT WordPiece: [CLS] ... [SEP], and --no-special leaves them out', async () => {
  const dir = path.join(TOKENIZERS, 'bert-uncased');
  const r = await prism(['tokenize', '--model', dir], 'Hello, world!');
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), '101 7592 1010 2088 999 102');
  const bare = await prism(['tokenize', '--model', dir, '--no-special'], 'Hello, world!');
  assert.equal(bare.stdout.trim(), '7592 1010 2088 999');
  // The older layout (vocab.txt alone) gives the same ids.
  const legacy = await prism(['tokenize', '--model', path.join(dir, 'vocab.txt')], 'Hello, world!');
  assert.equal(legacy.stdout.trim(), '101 7592 1010 2088 999 102');
});

test('GPT-2 byte-level BPE round trip through --decode', async () => {
  const dir = path.join(TOKENIZERS, 'gpt2');
  const text = 'Hello, world! Ünïcödé 日本語 🙂  spaces\n';
  const enc = await prism(['tokenize', '--model', dir], text);
  assert.equal(enc.code, 0, enc.stderr);
  assert.match(enc.stdout, /^15496 11 995 0 /);
  const dec = await prism(['tokenize', '--model', dir, '--decode'], enc.stdout);
  assert.equal(dec.code, 0, dec.stderr);
  assert.equal(dec.stdout, text + '\n', 'the text, then the newline that ends the output line');
});

test('Llama 2 SentencePiece .model: BOS first', async () => {
  const r = await prism(['tokenize', '--model', path.join(TOKENIZERS, 'llama2-spm', 'tokenizer.model')], 'Hello, world!');
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.trim(), '1 15043 29892 3186 29991');
});

test('invalid UTF-8 is replaced, not a crash', async () => {
  const dir = path.join(TOKENIZERS, 'gpt2');
  const r = await prism(['tokenize', '--model', dir], Buffer.from([0xff, 0xfe, 0x61, 0x62, 0x63]));
  assert.equal(r.code, 0, r.stderr);
  const dec = await prism(['tokenize', '--model', dir, '--decode'], r.stdout);
  assert.equal(dec.stdout, '\uFFFD\uFFFDabc\n');
});

test('bad input: clear message and exit 1', async () => {
  const gpt2 = path.join(TOKENIZERS, 'gpt2');
  const badId = await prism(['tokenize', '--model', gpt2, '--decode'], '1 2 99999999');
  assert.equal(badId.code, 1);
  assert.match(badId.stderr, /token id 99999999 is not in the vocabulary/);
  const notANumber = await prism(['tokenize', '--model', gpt2, '--decode'], '1 two');
  assert.equal(notANumber.code, 1);
  assert.ok(notANumber.stderr.length > 0);
  const missing = await prism(['tokenize', '--model', '/nonexistent/model'], 'x');
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /\/nonexistent\/model/);
  const noModel = await prism(['tokenize'], 'x');
  assert.notEqual(noModel.code, 0);
});
