"""Reference for media/log_mel: Whisper's log-mel spectrogram as openai/whisper computes it
(whisper/audio.py's `pad_or_trim` and `log_mel_spectrogram`, re-written here with torch:
whisper itself is not installed), with its Slaney filters read from mel_filters.npz.
tests/media/log_mel_test.cpp decodes or synthesises 16 kHz samples, writes them as
samples.safetensors, runs this script and compares media::log_mel_spectrogram and
media::mel_filters with what it writes.

    whisper_mel.py --out DIR --samples FILE.safetensors --filters mel_filters.npz

Writes DIR/mel.safetensors: mel_filters.<n> (F32 [n, 201], the npz's arrays) and, for n in 80
and 128, log_mel.<n>.padded (F32 [n, 3000]: the audio padded or trimmed to 30 s first, as
whisper does per segment and as transformers' WhisperFeatureExtractor does) and
log_mel.<n>.unpadded (F32 [n, len // 160]: the audio as it is).
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prism_ref import generator_parser, load_file, save_file  # noqa: E402

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_SAMPLES = 30 * SAMPLE_RATE  # 480000: 3000 frames
MEL_SIZES = (80, 128)


def load_filters(npz_path):
    """{n_mels: F32 tensor [n_mels, 201]} from whisper's assets/mel_filters.npz."""
    with np.load(npz_path, allow_pickle=False) as f:
        return {n: torch.from_numpy(f[f"mel_{n}"]) for n in MEL_SIZES}


def pad_or_trim(audio, length=CHUNK_SAMPLES):
    """Zero-pad at the end or cut to `length` samples (whisper.audio.pad_or_trim)."""
    if audio.shape[-1] > length:
        return audio[..., :length]
    if audio.shape[-1] < length:
        return torch.nn.functional.pad(audio, (0, length - audio.shape[-1]))
    return audio


def log_mel_spectrogram(audio, filters):
    """whisper.audio.log_mel_spectrogram: centred STFT (reflect), periodic Hann window,
    |X|^2 without the last frame, mel, log10 floored at 1e-10, clamped to 8 under the
    maximum, then (x + 4) / 4. audio: F32 [samples]; filters: F32 [n_mels, 201]."""
    window = torch.hann_window(N_FFT)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, center=True, pad_mode="reflect",
                      return_complex=True)
    magnitudes = stft[..., :-1].abs() ** 2
    mel_spec = filters @ magnitudes
    log_spec = torch.clamp(mel_spec, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def main():
    parser = generator_parser(__doc__.splitlines()[0])
    parser.add_argument("--samples", required=True, help="safetensors with 'samples' F32 [n] at 16 kHz")
    parser.add_argument("--filters", required=True, help="whisper's mel_filters.npz")
    args = parser.parse_args()

    audio = load_file(args.samples)["samples"].to(torch.float32).contiguous()
    filters = load_filters(args.filters)
    out = {}
    for n, f in filters.items():
        out[f"mel_filters.{n}"] = f.contiguous()
        out[f"log_mel.{n}.padded"] = log_mel_spectrogram(pad_or_trim(audio), f).contiguous()
        if audio.shape[-1] > N_FFT // 2:  # torch's reflect padding needs more samples than the pad
            out[f"log_mel.{n}.unpadded"] = log_mel_spectrogram(audio, f).contiguous()
    os.makedirs(args.out, exist_ok=True)
    save_file(out, os.path.join(args.out, "mel.safetensors"))


if __name__ == "__main__":
    main()
