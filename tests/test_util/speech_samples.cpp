#include "test_util/speech_samples.h"

#include <cstdint>
#include <span>
#include <string>

#include "base/check.h"
#include "base/file.h"
#include "media/audio.h"
#include "test_util/paths.h"

namespace prism::test {

const std::vector<float>& jfk() {
  static const std::vector<float> samples = [] {
    Result<std::string> bytes = read_file(testdata_dir() + "/audio/jfk.flac");
    PRISM_CHECK_MSG(bytes.has_value(), bytes.status().to_string().c_str());
    Result<media::Audio> audio =
        media::decode_audio(std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()));
    PRISM_CHECK_MSG(audio.has_value(), audio.status().to_string().c_str());
    return std::move(audio->samples);
  }();
  return samples;
}

}  // namespace prism::test
