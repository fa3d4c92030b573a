// Synthetic speech as 16-bit PCM WAV for the speech-to-text tests: there is no FLAC decoder
// or ffmpeg CLI on the test side, so long files are synthesised: voiced syllables (harmonics
// under two formants, a falling pitch, raised-cosine envelopes) grouped into words and
// utterances between silences, which the built-in energy VAD calls speech. Same samples for the
// same seed, every run.

export const RATE = 16000;

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

// One voiced syllable into out[at..]: pitch falling from f0 by 15 %, harmonics weighted by two
// formant bumps (f1, f2), a raised-cosine envelope. Returns the samples written.
function syllable(out, at, seconds, f0, f1, f2, amp) {
  const n = Math.min(Math.round(seconds * RATE), out.length - at);
  let phase = 0;
  for (let i = 0; i < n; i++) {
    const t = i / n;
    phase += (2 * Math.PI * f0 * (1 - 0.15 * t)) / RATE;
    let v = 0;
    for (let h = 1; h <= 12; h++) {
      const fh = h * f0;
      const w = Math.exp(-(((fh - f1) / 300) ** 2)) + 0.6 * Math.exp(-(((fh - f2) / 400) ** 2)) + 0.05;
      v += w * Math.sin(h * phase);
    }
    out[at + i] = amp * v * 0.5 * (1 - Math.cos(2 * Math.PI * t));
  }
  return n;
}

// `seconds` of audio: utterances of 3-12 s of words, separated by 1-3 s of silence (the last
// one cut at the end), over a faint noise floor.
export function speech(seconds, seed) {
  const r = rng(seed);
  const out = new Float32Array(Math.round(seconds * RATE));
  let at = Math.round(0.5 * RATE);
  while (at < out.length) {
    const end = Math.min(out.length, at + Math.round((3 + r() * 9) * RATE));
    while (at < end) {
      for (let s = 1 + Math.floor(r() * 3); s > 0 && at < end; s--)
        at += syllable(out, at, 0.12 + r() * 0.1, 110 + r() * 70, 500 + r() * 400, 1200 + r() * 900, 0.1);
      at += Math.round((0.05 + r() * 0.06) * RATE);  // between words
    }
    at += Math.round((1 + r() * 2) * RATE);  // between utterances
  }
  const noise = rng(seed + 1);
  for (let i = 0; i < out.length; i++) out[i] += (noise() - 0.5) * 2e-4;
  return out;
}

export function wav(samples) {
  const data = samples.length * 2;
  const b = Buffer.alloc(44 + data);
  b.write('RIFF', 0, 'ascii');
  b.writeUInt32LE(36 + data, 4);
  b.write('WAVEfmt ', 8, 'ascii');
  b.writeUInt32LE(16, 16);        // fmt chunk size
  b.writeUInt16LE(1, 20);         // PCM
  b.writeUInt16LE(1, 22);         // mono
  b.writeUInt32LE(RATE, 24);
  b.writeUInt32LE(RATE * 2, 28);  // bytes per second
  b.writeUInt16LE(2, 32);         // block align
  b.writeUInt16LE(16, 34);        // bits per sample
  b.write('data', 36, 'ascii');
  b.writeUInt32LE(data, 40);
  for (let i = 0; i < samples.length; i++)
    b.writeInt16LE(Math.max(-32768, Math.min(32767, Math.round(samples[i] * 32767))), 44 + i * 2);
  return b;
}
