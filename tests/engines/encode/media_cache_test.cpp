// The media cache: hits and misses per (encoder id, key), LRU eviction by bytes, the disabled
// cache, files written through and read back by a second cache on the same directory, corrupt
// files deleted, the disk budget (oldest modification first), and several threads at once.
#include "engines/encode/media_cache.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include <xxhash.h>

#include "test_util/paths.h"

namespace prism::engines::encode {
namespace {

namespace fs = std::filesystem;

media::MediaKey key_of(int64_t n) { return media::MediaKeyBuilder().add(n).finish(); }

MediaCacheOptions options(int64_t max_bytes, const std::string& disk_dir = "", int64_t max_disk_bytes = 4ll << 30) {
  MediaCacheOptions o;
  o.max_bytes = max_bytes;
  o.disk_dir = disk_dir;
  o.max_disk_bytes = max_disk_bytes;
  return o;
}

// rows x cols values that say which (seed) they belong to.
MediaFeaturesPtr features(int64_t rows, int64_t cols, float seed) {
  auto f = std::make_shared<MediaFeatures>();
  f->rows = rows;
  f->cols = cols;
  for (int64_t i = 0; i < rows * cols; ++i) f->values.push_back(seed + 0.001f * float(i));
  return f;
}

void expect_same(const MediaFeaturesPtr& got, const MediaFeaturesPtr& want) {
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->rows, want->rows);
  EXPECT_EQ(got->cols, want->cols);
  EXPECT_EQ(got->values, want->values);
}

std::vector<fs::path> cache_files(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".bin") files.push_back(e.path());
  return files;
}

// The file of the one entry inserted under `encoder_id` (its name starts with the id's hash).
fs::path only_file(const std::string& dir) {
  const std::vector<fs::path> files = cache_files(dir);
  EXPECT_EQ(files.size(), 1u);
  return files.empty() ? fs::path() : files[0];
}

void set_age(const fs::path& path, int seconds_ago) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(seconds_ago));
}

TEST(MediaCache, HitMissAndEncoderIdsKeptApart) {
  MediaCache cache(options(1 << 20));
  const MediaFeaturesPtr a = features(4, 8, 1), b = features(4, 8, 2);
  EXPECT_EQ(cache.find("clip-a", key_of(1)), nullptr);
  cache.insert("clip-a", key_of(1), a);
  cache.insert("clip-b", key_of(1), b);  // the same image under another encoder
  EXPECT_EQ(cache.find("clip-a", key_of(1)), a);
  EXPECT_EQ(cache.find("clip-b", key_of(1)), b);
  EXPECT_EQ(cache.find("clip-a", key_of(2)), nullptr);
  EXPECT_EQ(cache.find("clip-c", key_of(1)), nullptr);
  // An id that is another's prefix plus the separator byte does not collide.
  EXPECT_EQ(cache.find(std::string_view("clip-a\0", 7), key_of(1)), nullptr);
  const MediaCacheStats s = cache.stats();
  EXPECT_EQ(s.lookups, 6);
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.disk_hits, 0);
  EXPECT_EQ(s.inserts, 2);
  EXPECT_EQ(s.entries, 2);
  EXPECT_EQ(s.bytes, 2 * 4 * 8 * 4);
  cache.insert("clip-a", key_of(1), b);  // replaced, not counted twice
  EXPECT_EQ(cache.find("clip-a", key_of(1)), b);
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.stats().bytes, 2 * 4 * 8 * 4);
  cache.clear();
  EXPECT_EQ(cache.find("clip-a", key_of(1)), nullptr);
  EXPECT_EQ(cache.stats().bytes, 0);
  EXPECT_EQ(cache.stats().entries, 0);
}

TEST(MediaCache, EvictsTheLeastRecentlyUsedByBytes) {
  // 1 KiB entries (16 x 16 f32) in a 3.5 KiB cache: three fit.
  MediaCache cache(options(3584));
  for (int k = 0; k < 3; ++k) cache.insert("enc", key_of(k), features(16, 16, float(k)));
  EXPECT_NE(cache.find("enc", key_of(0)), nullptr);  // 0 is now the most recent; 1 the least
  cache.insert("enc", key_of(3), features(16, 16, 3));
  EXPECT_EQ(cache.find("enc", key_of(1)), nullptr);
  for (int k : {0, 2, 3}) EXPECT_NE(cache.find("enc", key_of(k)), nullptr) << k;
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.stats().bytes, 3 * 1024);
  // A 2 KiB entry pushes out the two least recently used (2 after 0, 3 were found... in order 0, 2, 3).
  cache.insert("enc", key_of(4), features(32, 16, 4));
  EXPECT_EQ(cache.find("enc", key_of(0)), nullptr);
  EXPECT_EQ(cache.find("enc", key_of(2)), nullptr);
  EXPECT_NE(cache.find("enc", key_of(3)), nullptr);
  EXPECT_NE(cache.find("enc", key_of(4)), nullptr);
  EXPECT_EQ(cache.stats().bytes, 3 * 1024);
  EXPECT_EQ(cache.stats().evictions, 3);
  // An entry larger than the whole cache is not kept (it would push out everything).
  cache.insert("enc", key_of(5), features(64, 16, 5));
  EXPECT_EQ(cache.find("enc", key_of(5)), nullptr);
  EXPECT_NE(cache.find("enc", key_of(3)), nullptr);
}

TEST(MediaCache, DisabledCacheMissesAndDropsEverything) {
  const std::string dir = test::scratch_dir("media_cache_disabled");
  MediaCache cache(options(0, dir));
  cache.insert("enc", key_of(1), features(2, 2, 1));
  EXPECT_EQ(cache.find("enc", key_of(1)), nullptr);
  EXPECT_EQ(cache.stats().entries, 0);
  EXPECT_EQ(cache.stats().inserts, 0);
  EXPECT_TRUE(cache_files(dir).empty());
}

TEST(MediaCache, PersistsAcrossInstancesOnOneDirectory) {
  const std::string dir = test::scratch_dir("media_cache_persist");
  const MediaFeaturesPtr a = features(3, 5, 7), empty = features(0, 5, 0);
  {
    MediaCache first(options(1 << 20, dir));
    first.insert("siglip|f32", key_of(1), a);
    first.insert("siglip|f32", key_of(2), empty);
  }
  // "<xxh64 of the encoder id>-<key>.bin", header + values.
  char id_hash[17];
  std::snprintf(id_hash, sizeof id_hash, "%016llx", static_cast<unsigned long long>(XXH64("siglip|f32", 10, 0)));
  const std::string file_a = dir + "/" + id_hash + "-" + key_of(1).hex() + ".bin";
  ASSERT_TRUE(fs::exists(file_a));
  EXPECT_EQ(fs::file_size(file_a), 32u + 3 * 5 * 4);
  EXPECT_EQ(cache_files(dir).size(), 2u);

  MediaCache second(options(1 << 20, dir));
  expect_same(second.find("siglip|f32", key_of(1)), a);
  expect_same(second.find("siglip|f32", key_of(2)), empty);
  EXPECT_EQ(second.find("siglip|bf16", key_of(1)), nullptr);  // another encoder id
  EXPECT_EQ(second.stats().disk_hits, 2);
  EXPECT_EQ(second.stats().hits, 2);
  EXPECT_EQ(second.stats().entries, 2);  // loaded into memory: the next find is a memory hit
  expect_same(second.find("siglip|f32", key_of(1)), a);
  EXPECT_EQ(second.stats().disk_hits, 2);
  EXPECT_EQ(second.stats().hits, 3);
  // clear() empties memory only; the file answers again.
  second.clear();
  expect_same(second.find("siglip|f32", key_of(1)), a);
  EXPECT_EQ(second.stats().disk_hits, 3);
}

TEST(MediaCache, CorruptFilesAreMissedAndDeleted) {
  const std::string dir = test::scratch_dir("media_cache_corrupt");
  const std::string id = "enc";
  // Each case damages the one file a fresh directory holds, then a fresh cache looks it up.
  const std::vector<std::function<void(const fs::path&)>> damages = {
      [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) - 4); },  // truncated values
      [](const fs::path& p) { fs::resize_file(p, 20); },                     // truncated header
      [](const fs::path& p) { fs::resize_file(p, 0); },                      // empty
      [](const fs::path& p) {                                                // wrong magic
        std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(0);
        f.put('X');
      },
      [](const fs::path& p) {  // a flipped value: the checksum
        std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(40);
        const char byte = char(f.get() ^ 0x5a);
        f.seekp(40);
        f.put(byte);
      },
      [](const fs::path& p) {  // rows * cols that the size does not hold
        std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
        const int64_t rows = int64_t(1) << 40;
        f.seekp(8);
        f.write(reinterpret_cast<const char*>(&rows), sizeof rows);
      },
  };
  for (size_t i = 0; i < damages.size(); ++i) {
    SCOPED_TRACE(i);
    fs::remove_all(dir);
    {
      MediaCache writer(options(1 << 20, dir));
      writer.insert(id, key_of(1), features(4, 4, 1));
    }
    const fs::path file = only_file(dir);
    damages[i](file);
    MediaCache reader(options(1 << 20, dir));
    EXPECT_EQ(reader.find(id, key_of(1)), nullptr);
    EXPECT_FALSE(fs::exists(file));
    EXPECT_EQ(reader.stats().disk_hits, 0);
    // A later insert writes it afresh.
    reader.insert(id, key_of(1), features(4, 4, 1));
    MediaCache again(options(1 << 20, dir));
    expect_same(again.find(id, key_of(1)), features(4, 4, 1));
  }
}

TEST(MediaCache, DiskBudgetDeletesTheOldestFiles) {
  const std::string dir = test::scratch_dir("media_cache_budget");
  // Files of 32 + 1024 bytes; the budget holds three.
  const int64_t file_bytes = 32 + 1024;
  MediaCache cache(options(1 << 20, dir, 3 * file_bytes + 100));
  char id_hash[17];
  std::snprintf(id_hash, sizeof id_hash, "%016llx", static_cast<unsigned long long>(XXH64("enc", 3, 0)));
  auto file_of = [&](int k) { return fs::path(dir + "/" + id_hash + "-" + key_of(k).hex() + ".bin"); };
  for (int k = 0; k < 3; ++k) cache.insert("enc", key_of(k), features(16, 16, float(k)));
  // Modification times say the order (the clock's tick may be coarser than the inserts).
  set_age(file_of(0), 30);
  set_age(file_of(1), 40);
  set_age(file_of(2), 20);
  // A disk hit makes file 1 recent again: a second cache (empty memory) reads it.
  MediaCache reader(options(1 << 20, dir, 3 * file_bytes + 100));
  ASSERT_NE(reader.find("enc", key_of(1)), nullptr);
  cache.insert("enc", key_of(3), features(16, 16, 3));
  EXPECT_FALSE(fs::exists(file_of(0)));  // the oldest
  for (int k : {1, 2, 3}) EXPECT_TRUE(fs::exists(file_of(k))) << k;
  // Two more: 2 (20 s old) goes, then the older of 1 and 3.
  set_age(file_of(1), 10);
  set_age(file_of(3), 5);
  cache.insert("enc", key_of(4), features(16, 16, 4));
  EXPECT_FALSE(fs::exists(file_of(2)));
  cache.insert("enc", key_of(5), features(16, 16, 5));
  EXPECT_FALSE(fs::exists(file_of(1)));
  EXPECT_EQ(cache_files(dir).size(), 3u);
  // A new cache over a directory beyond its (smaller) budget trims it when it opens.
  MediaCache small(options(1 << 20, dir, file_bytes));
  EXPECT_EQ(cache_files(dir).size(), 1u);
}

TEST(MediaCache, ManyThreadsFindAndInsert) {
  const std::string dir = test::scratch_dir("media_cache_threads");
  // 40 keys of 1 KiB in a 16 KiB cache: constant eviction while threads look up and insert.
  MediaCache cache(options(16 << 10, dir));
  constexpr int kThreads = 6, kKeys = 40, kRounds = 400;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        const int k = (r * 7 + t * 13) % kKeys;
        const std::string id = k % 2 ? "odd" : "even";
        if (MediaFeaturesPtr f = cache.find(id, key_of(k))) {
          if (f->rows != 16 || f->values.size() != 256 || f->values[0] != float(k)) ++wrong;
        } else {
          cache.insert(id, key_of(k), features(16, 16, float(k)));
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  const MediaCacheStats s = cache.stats();
  EXPECT_EQ(s.lookups, kThreads * kRounds);
  EXPECT_LE(s.bytes, 16 << 10);
  EXPECT_EQ(s.bytes, s.entries * 1024);
  EXPECT_GT(s.hits, 0);
  for (int k = 0; k < kKeys; ++k) {  // every key is on disk, whole
    MediaCache reader(options(1 << 20, dir));
    const MediaFeaturesPtr f = reader.find(k % 2 ? "odd" : "even", key_of(k));
    ASSERT_NE(f, nullptr) << k;
    EXPECT_EQ(f->values, features(16, 16, float(k))->values);
  }
}

// Under ctest each test is its own process, so here configure() runs before first use.
TEST(MediaCache, ConfigureBeforeFirstUseSetsTheOptions) {
  MediaCache::configure(options(0));
  MediaCache::shared().insert("enc", key_of(1), features(2, 2, 1));
  EXPECT_EQ(MediaCache::shared().find("enc", key_of(1)), nullptr);
  MediaCache::configure(options(1 << 20));
}

TEST(MediaCache, SharedIsOneCacheAndConfigureReplacesIt) {
  MediaCache& shared = MediaCache::shared();
  EXPECT_EQ(&shared, &MediaCache::shared());
  MediaCache::configure(options(1 << 20));
  shared.insert("enc", key_of(1), features(2, 2, 1));
  EXPECT_NE(MediaCache::shared().find("enc", key_of(1)), nullptr);
  // After first use configure() replaces the options and empties the memory.
  MediaCache::configure(options(0));
  EXPECT_EQ(shared.find("enc", key_of(1)), nullptr);
  shared.insert("enc", key_of(1), features(2, 2, 1));
  EXPECT_EQ(shared.find("enc", key_of(1)), nullptr);
  MediaCache::configure(options(1 << 20));
  shared.insert("enc", key_of(2), features(2, 2, 2));
  EXPECT_NE(shared.find("enc", key_of(2)), nullptr);
}

}  // namespace
}  // namespace prism::engines::encode
