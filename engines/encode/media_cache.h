// engines/encode/media_cache.h: encoder outputs kept by content, so an image is encoded once
// per conversation rather than once per turn (ANCHORS.md: what VLM users ask for). Keyed by
// (encoder id, media::MediaKey); LRU eviction within a byte budget; optionally written
// through to a directory so that a restart keeps them (files "<encoder hash>-<key>.bin",
// evicted oldest-first within their own budget). One cache per process, shared by every
// deployment, request, turn and endpoint (VLM chat features and image embeddings alike):
// the encoder id keeps models apart. Thread-safe: replicas of several deployments use it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "media/media_key.h"

namespace prism::engines::encode {

// One encoder output: rows × cols f32, row-major.
struct MediaFeatures {
  int64_t rows = 0, cols = 0;
  std::vector<float> values;
  int64_t bytes() const { return int64_t(values.size() * sizeof(float)); }
};
using MediaFeaturesPtr = std::shared_ptr<const MediaFeatures>;

struct MediaCacheOptions {
  int64_t max_bytes = 512ll << 20;       // in memory; 0 disables the cache
  std::string disk_dir;                  // empty: memory only
  int64_t max_disk_bytes = 4ll << 30;    // <= 0: the directory is not used
};

// hits counts memory and disk hits; disk_hits is the subset found on disk.
struct MediaCacheStats {
  int64_t lookups = 0, hits = 0, disk_hits = 0, inserts = 0, evictions = 0;
  int64_t bytes = 0, entries = 0;
};

class MediaCache {
 public:
  explicit MediaCache(MediaCacheOptions options);
  ~MediaCache();

  // The process-wide cache (created with default options on first use, unless configure()
  // ran first). app/ configures it from the server's flags before deployments start. After
  // first use, configure() replaces the options and empties the memory; files on disk stay.
  static MediaCache& shared();
  static void configure(MediaCacheOptions options);

  // encoder_id names the encoder and everything that makes its outputs differ (model dir,
  // precision). Null on a miss. A disk hit is loaded into memory.
  MediaFeaturesPtr find(std::string_view encoder_id, const media::MediaKey& key);
  void insert(std::string_view encoder_id, const media::MediaKey& key, MediaFeaturesPtr features);
  MediaCacheStats stats() const;
  void clear();  // memory only (tests)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::engines::encode
