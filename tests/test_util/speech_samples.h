// tests/test_util/speech_samples.h: real speech for the ASR and VAD tests, decoded once.
#pragma once

#include <vector>

namespace prism::test {

// testdata's audio/jfk.flac (11 s of JFK) as every ASR path sees it: 16 kHz mono floats,
// decoded by media::decode_audio. Aborts the test binary when the file is missing.
const std::vector<float>& jfk();

}  // namespace prism::test
