// engines/encode/media_cache.cpp: MediaCache (media_cache.h): an LRU of encoder outputs in
// memory within a byte budget, written through to files when a directory is configured.
// NOTE: the mutex guards the LRU, its index and the counters, never file I/O: a disk read or
// write happens outside it, so one replica's miss never stalls another's lookups. The disk
// store has its own mutex for its byte count and budget scans; the two are never held
// together. Files are complete or absent (written to a temporary name, then renamed); any
// file that does not read back exactly (magic, sizes, checksum) is deleted and missed.
#include "engines/encode/media_cache.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <list>
#include <unordered_map>
#include <utility>

#include <unistd.h>
#include <xxhash.h>

#include "base/check.h"
#include "base/status.h"
#include "base/log.h"

namespace prism::engines::encode {
namespace {

namespace fs = std::filesystem;

// A cache file: this header, then rows * cols f32 in the machine's byte order.
struct FileHeader {
  char magic[8];
  int64_t rows;
  int64_t cols;
  uint64_t checksum;  // XXH64 of the values
};
static_assert(sizeof(FileHeader) == 32);
constexpr char kMagic[8] = {'P', 'R', 'I', 'S', 'M', 'M', 'C', '1'};
constexpr std::string_view kFileSuffix = ".bin";
constexpr std::string_view kTempMarker = ".tmp.";
// A temporary file this old was left by a process that died while writing it.
constexpr auto kStaleTempAge = std::chrono::minutes(10);

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The memory index's key: the encoder id, a separator and the key's 16 bytes.
std::string entry_key(std::string_view encoder_id, const media::MediaKey& key) {
  std::string k(encoder_id);
  k.push_back('\0');
  k.append(reinterpret_cast<const char*>(&key.high), sizeof key.high);
  k.append(reinterpret_cast<const char*>(&key.low), sizeof key.low);
  return k;
}

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

// The files of one directory, within a byte budget (oldest modification time goes first; a
// hit refreshes it, so the order is least recently used across restarts).
class DiskStore {
 public:
  DiskStore(std::string dir, int64_t max_bytes) : dir_(std::move(dir)), max_bytes_(max_bytes) {}

  // Creates the directory and counts what it holds; the error says why it cannot be used.
  Status open() {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_, ec)) return internal_error("cannot create " + dir_ + ": " + ec.message());
    std::lock_guard lock(mu_);
    enforce_budget();
    return Status();
  }

  // Null when absent; a corrupt or truncated file is deleted.
  MediaFeaturesPtr load(std::string_view encoder_id, const media::MediaKey& key) {
    const std::string path = path_of(encoder_id, key);
    File file(std::fopen(path.c_str(), "rb"));
    if (!file) return nullptr;
    MediaFeaturesPtr features = read(file.get());
    file.reset();
    std::error_code ec;
    if (!features) {
      PRISM_LOG_WARN("media cache: {} is corrupt; deleted", path);
      fs::remove(path, ec);
      return nullptr;
    }
    fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // recently used
    return features;
  }

  void store(std::string_view encoder_id, const media::MediaKey& key, const MediaFeatures& features) {
    const std::string path = path_of(encoder_id, key);
    std::error_code ec;
    if (fs::exists(path, ec)) {  // the same key holds the same values
      fs::last_write_time(path, fs::file_time_type::clock::now(), ec);
      return;
    }
    static std::atomic<uint64_t> counter{0};
    const std::string temp = path + std::string(kTempMarker) + std::to_string(::getpid()) + "." +
                             std::to_string(counter.fetch_add(1));
    if (!write(temp, features)) {
      fs::remove(temp, ec);
      PRISM_LOG_WARN("media cache: cannot write {}", temp);
      return;
    }
    fs::rename(temp, path, ec);
    if (ec) {
      fs::remove(temp, ec);
      return;
    }
    std::lock_guard lock(mu_);
    bytes_ += int64_t(sizeof(FileHeader)) + features.bytes();
    if (bytes_ > max_bytes_) enforce_budget();
  }

 private:
  // "<XXH64 of the encoder id>-<key>.bin"
  std::string path_of(std::string_view encoder_id, const media::MediaKey& key) const {
    return dir_ + "/" + hex64(XXH64(encoder_id.data(), encoder_id.size(), 0)) + "-" + key.hex() +
           std::string(kFileSuffix);
  }

  static MediaFeaturesPtr read(std::FILE* file) {
    FileHeader header;
    if (std::fread(&header, sizeof header, 1, file) != 1) return nullptr;
    if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 || header.rows < 0 || header.cols < 0) return nullptr;
    int64_t count = 0;
    if (__builtin_mul_overflow(header.rows, header.cols, &count) || count > (int64_t(1) << 40)) return nullptr;
    // The size is checked before allocating: a header may claim anything.
    if (std::fseek(file, 0, SEEK_END) != 0) return nullptr;
    const long size = std::ftell(file);
    if (size < 0 || int64_t(size) != int64_t(sizeof header) + count * int64_t(sizeof(float))) return nullptr;
    if (std::fseek(file, long(sizeof header), SEEK_SET) != 0) return nullptr;
    auto features = std::make_shared<MediaFeatures>();
    features->rows = header.rows;
    features->cols = header.cols;
    features->values.resize(size_t(count));
    if (count > 0 && std::fread(features->values.data(), sizeof(float), size_t(count), file) != size_t(count))
      return nullptr;
    if (XXH64(features->values.data(), size_t(features->bytes()), 0) != header.checksum) return nullptr;
    return features;
  }

  static bool write(const std::string& path, const MediaFeatures& features) {
    File file(std::fopen(path.c_str(), "wb"));
    if (!file) return false;
    FileHeader header;
    std::memcpy(header.magic, kMagic, sizeof kMagic);
    header.rows = features.rows;
    header.cols = features.cols;
    header.checksum = XXH64(features.values.data(), size_t(features.bytes()), 0);
    const size_t count = features.values.size();
    const bool ok = std::fwrite(&header, sizeof header, 1, file.get()) == 1 &&
                    (count == 0 || std::fwrite(features.values.data(), sizeof(float), count, file.get()) == count);
    return std::fclose(file.release()) == 0 && ok;
  }

  // NOTE: recounts the directory (other processes may share it) and deletes the files
  // modified longest ago until the rest fit the budget. Under mu_.
  void enforce_budget() {
    struct Found {
      fs::file_time_type mtime;
      int64_t size;
      fs::path path;
    };
    std::vector<Found> files;
    int64_t total = 0;
    std::error_code ec;
    const auto now = fs::file_time_type::clock::now();
    for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      const fs::file_time_type mtime = it->last_write_time(ec);
      if (ec) continue;
      if (name.find(kTempMarker) != std::string::npos) {
        if (now - mtime > kStaleTempAge) fs::remove(it->path(), ec);
        continue;
      }
      if (!name.ends_with(kFileSuffix) || !it->is_regular_file(ec)) continue;
      const int64_t size = int64_t(it->file_size(ec));
      if (ec) continue;
      files.push_back({mtime, size, it->path()});
      total += size;
    }
    std::sort(files.begin(), files.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
    for (const Found& f : files) {
      if (total <= max_bytes_) break;
      if (fs::remove(f.path, ec) || !fs::exists(f.path, ec)) total -= f.size;
    }
    bytes_ = total;
  }

  const std::string dir_;
  const int64_t max_bytes_;
  std::mutex mu_;
  int64_t bytes_ = 0;  // this directory's cache files, as last counted plus what was written since; under mu_
};

}  // namespace

struct MediaCache::Impl {
  struct Entry {
    std::string key;  // entry_key()
    MediaFeaturesPtr features;
  };

  explicit Impl(MediaCacheOptions o) { reset(std::move(o)); }

  // New options: the memory is emptied and the directory (if any) opened. Under mu.
  void reset(MediaCacheOptions o) {
    options = std::move(o);
    lru.clear();
    index.clear();
    stats.bytes = stats.entries = 0;
    disk.reset();
    if (options.max_bytes <= 0 || options.disk_dir.empty()) return;
    if (options.max_disk_bytes <= 0) {
      PRISM_LOG_WARN("media cache: max_disk_bytes is {}; {} is not used", options.max_disk_bytes, options.disk_dir);
      return;
    }
    auto store = std::make_shared<DiskStore>(options.disk_dir, options.max_disk_bytes);
    if (Status s = store->open(); !s.ok()) {
      PRISM_LOG_WARN("media cache: {}; keeping encoder outputs in memory only", s.message());
      return;
    }
    disk = std::move(store);
  }

  bool enabled() const { return options.max_bytes > 0; }

  // Under mu.
  void put(std::string key, MediaFeaturesPtr features) {
    if (auto it = index.find(key); it != index.end()) {
      stats.bytes -= it->second->features->bytes();
      lru.erase(it->second);
      index.erase(it);
      --stats.entries;
    }
    if (features->bytes() > options.max_bytes) return;  // it would push out everything else
    lru.push_front(Entry{key, std::move(features)});
    index.emplace(std::move(key), lru.begin());
    stats.bytes += lru.front().features->bytes();
    ++stats.entries;
    while (stats.bytes > options.max_bytes) {  // the least recently used go first
      const Entry& oldest = lru.back();
      stats.bytes -= oldest.features->bytes();
      index.erase(oldest.key);
      lru.pop_back();
      --stats.entries;
      ++stats.evictions;
    }
  }

  mutable std::mutex mu;
  MediaCacheOptions options;                 // under mu
  std::list<Entry> lru;                      // most recently used first; under mu
  std::unordered_map<std::string, std::list<Entry>::iterator> index;  // under mu
  MediaCacheStats stats;                     // under mu
  std::shared_ptr<DiskStore> disk;           // null: memory only; the pointer under mu, the store thread-safe
};

MediaCache::MediaCache(MediaCacheOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
MediaCache::~MediaCache() = default;

namespace {

// What configure() said before the shared cache existed.
struct SharedConfig {
  std::mutex mu;
  bool created = false;  // under mu
  MediaCacheOptions options;  // under mu
};

SharedConfig& shared_config() {
  static SharedConfig config;
  return config;
}

}  // namespace

MediaCache& MediaCache::shared() {
  // NOTE: a function-local static: created once, thread-safely, on first use, with the options
  // configure() left (the defaults otherwise).
  static MediaCache cache([] {
    SharedConfig& config = shared_config();
    std::lock_guard lock(config.mu);
    config.created = true;
    return config.options;
  }());
  return cache;
}

void MediaCache::configure(MediaCacheOptions options) {
  SharedConfig& config = shared_config();
  {
    std::lock_guard lock(config.mu);
    if (!config.created) {
      config.options = std::move(options);
      return;
    }
  }
  // Already in use: the new options replace the old and the memory is emptied (what it holds
  // may have been computed under settings that no longer apply); files on disk stay.
  MediaCache& cache = shared();
  std::lock_guard lock(cache.impl_->mu);
  cache.impl_->reset(std::move(options));
}

MediaFeaturesPtr MediaCache::find(std::string_view encoder_id, const media::MediaKey& key) {
  std::string k = entry_key(encoder_id, key);
  std::shared_ptr<DiskStore> disk;
  {
    std::lock_guard lock(impl_->mu);
    ++impl_->stats.lookups;
    if (!impl_->enabled()) return nullptr;
    if (auto it = impl_->index.find(k); it != impl_->index.end()) {
      impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second);
      ++impl_->stats.hits;
      return it->second->features;
    }
    disk = impl_->disk;
  }
  if (!disk) return nullptr;
  MediaFeaturesPtr features = disk->load(encoder_id, key);
  if (!features) return nullptr;
  std::lock_guard lock(impl_->mu);
  ++impl_->stats.hits;
  ++impl_->stats.disk_hits;
  if (impl_->enabled() && !impl_->index.contains(k)) impl_->put(std::move(k), features);
  return features;
}

void MediaCache::insert(std::string_view encoder_id, const media::MediaKey& key, MediaFeaturesPtr features) {
  PRISM_CHECK(features != nullptr);
  PRISM_CHECK(features->rows >= 0 && features->cols >= 0 &&
              int64_t(features->values.size()) == features->rows * features->cols);
  std::shared_ptr<DiskStore> disk;
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->enabled()) return;
    ++impl_->stats.inserts;
    impl_->put(entry_key(encoder_id, key), features);
    disk = impl_->disk;
  }
  if (disk) disk->store(encoder_id, key, *features);
}

MediaCacheStats MediaCache::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

void MediaCache::clear() {
  std::lock_guard lock(impl_->mu);
  impl_->lru.clear();
  impl_->index.clear();
  impl_->stats.bytes = impl_->stats.entries = 0;
}

}  // namespace prism::engines::encode
