#include "media/media_key.h"

#include <cstdio>

#include <xxhash.h>

namespace prism::media {

std::string MediaKey::hex() const {
  char text[33];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(high),
                static_cast<unsigned long long>(low));
  return text;
}

MediaKeyBuilder::MediaKeyBuilder() : state_(XXH3_createState()) { XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_)); }
MediaKeyBuilder::~MediaKeyBuilder() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

MediaKeyBuilder& MediaKeyBuilder::add(std::span<const uint8_t> bytes) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), bytes.data(), bytes.size());
  return *this;
}

MediaKeyBuilder& MediaKeyBuilder::add(std::string_view text) {
  add(int64_t(text.size()));
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), text.data(), text.size());
  return *this;
}

MediaKeyBuilder& MediaKeyBuilder::add(int64_t value) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), &value, sizeof value);
  return *this;
}

MediaKeyBuilder& MediaKeyBuilder::add(double value) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), &value, sizeof value);
  return *this;
}

MediaKey MediaKeyBuilder::finish() const {
  const XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return MediaKey{h.high64, h.low64};
}

}  // namespace prism::media
