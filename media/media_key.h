// media/media_key.h: the content key of a media item: XXH3-128 of its decoded pixels and of
// everything that changes what the encoder sees (preprocessing parameters, budget knobs).
// The media cache stores encoder outputs under it and the prefix cache mixes it into the
// hashes of KV blocks that hold the item's visual tokens, so two different images behind
// identical placeholder ids never share cached state.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace prism::media {

struct MediaKey {
  uint64_t high = 0, low = 0;

  bool operator==(const MediaKey&) const = default;
  std::string hex() const;  // 32 lowercase hex digits
  // 64 bits of it, for hash chains and unordered containers.
  uint64_t fold() const { return high ^ (low * 0x9e3779b97f4a7c15ull); }
};

// Accumulates bytes into a key: pixels first, then each parameter that shapes the input.
class MediaKeyBuilder {
 public:
  MediaKeyBuilder();
  ~MediaKeyBuilder();
  MediaKeyBuilder(const MediaKeyBuilder&) = delete;
  MediaKeyBuilder& operator=(const MediaKeyBuilder&) = delete;

  MediaKeyBuilder& add(std::span<const uint8_t> bytes);
  MediaKeyBuilder& add(std::string_view text);  // length-prefixed, so "ab"+"c" != "a"+"bc"
  MediaKeyBuilder& add(int64_t value);
  MediaKeyBuilder& add(double value);
  MediaKey finish() const;

 private:
  void* state_;  // XXH3_state_t
};

}  // namespace prism::media

template <>
struct std::hash<prism::media::MediaKey> {
  size_t operator()(const prism::media::MediaKey& key) const noexcept { return size_t(key.fold()); }
};
