"""Self-tests of whisper_mel.py: its frame counts, pad_or_trim, where a pure tone lands, and
the clamp and scale, so the C++ log-mel test compares against arithmetic pinned here.
Run: /usr/bin/python3 -m unittest discover -s tests/reference -p "test_*.py"
"""

import math
import os
import unittest

import torch

import whisper_mel as wm

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTDATA = os.environ.get("PRISM_TESTDATA_DIR") or os.path.join(REPO_DIR, "..", "shared", "testdata")
NPZ = os.path.join(TESTDATA, "whisper", "mel_filters.npz")


def tone(hz, samples, amplitude=0.5):
    t = torch.arange(samples, dtype=torch.float64) / wm.SAMPLE_RATE
    return (amplitude * torch.sin(2 * math.pi * hz * t)).to(torch.float32)


class PadOrTrim(unittest.TestCase):
    def test_pads_with_zeros_and_trims(self):
        self.assertEqual(wm.pad_or_trim(torch.ones(10), 16).tolist(), [1.0] * 10 + [0.0] * 6)
        self.assertEqual(wm.pad_or_trim(torch.arange(20.0), 4).tolist(), [0.0, 1.0, 2.0, 3.0])


@unittest.skipUnless(os.path.exists(NPZ), f"no {NPZ}")
class LogMel(unittest.TestCase):
    def setUp(self):
        self.filters = wm.load_filters(NPZ)

    def test_filter_shapes(self):
        self.assertEqual(tuple(self.filters[80].shape), (80, 201))
        self.assertEqual(tuple(self.filters[128].shape), (128, 201))

    def test_frame_counts(self):
        # A centred STFT has 1 + n // 160 frames; whisper drops the last one.
        for n in (400, 16000, 21937):
            mel = wm.log_mel_spectrogram(tone(440, n), self.filters[80])
            self.assertEqual(tuple(mel.shape), (80, n // wm.HOP_LENGTH))
        padded = wm.log_mel_spectrogram(wm.pad_or_trim(tone(440, 16000)), self.filters[80])
        self.assertEqual(tuple(padded.shape), (80, 3000))

    def test_a_tone_peaks_in_the_filter_that_covers_it(self):
        # 1 kHz is FFT bin 25 (40 Hz a bin); the loudest mel row is the filter heaviest there.
        mel = wm.log_mel_spectrogram(tone(1000, 16000), self.filters[80])
        loudest = int(mel[:, 10:-10].mean(dim=1).argmax())
        self.assertEqual(loudest, int(self.filters[80][:, 25].argmax()))

    def test_clamp_and_scale(self):
        mel = wm.log_mel_spectrogram(wm.pad_or_trim(tone(300, 8000)), self.filters[80])
        # The padding is silence: clamped to 8 decades under the maximum, i.e. 2 under it
        # after / 4.
        self.assertAlmostEqual(float(mel.max() - mel.min()), 2.0, places=5)
        silence = wm.log_mel_spectrogram(torch.zeros(1600), self.filters[80])
        self.assertTrue(torch.all(silence == (-10.0 + 4.0) / 4.0))


if __name__ == "__main__":
    unittest.main()
