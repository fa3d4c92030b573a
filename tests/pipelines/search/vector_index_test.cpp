// The vector index over an embedding folder: the .npy header, exact search by inner product
// (normalised folders) and L2 (others) against brute force, index.faiss built, reused, and
// ignored when stale, and only committed rows searched.
#include "pipelines/search/vector_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "test_util/paths.h"

namespace prism::pipelines::search {
namespace {

namespace fs = std::filesystem;

struct Folder {
  std::string dir;
  int64_t dims = 0;
  std::vector<float> vectors;  // committed rows
  std::vector<std::string> ids;
};

// Writes a folder as app/embed_output does, with `torn_rows` uncommitted rows after the
// committed ones (and their ids).
Folder make_folder(const std::string& name, int64_t rows, int64_t dims, bool normalized, int64_t torn_rows = 0) {
  Folder f{test::scratch_dir(name), dims, {}, {}};
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> all(static_cast<size_t>((rows + torn_rows) * dims));
  for (float& v : all) v = normal(rng);
  if (normalized) {
    for (int64_t r = 0; r < rows + torn_rows; ++r) {
      float* row = all.data() + r * dims;
      const float norm = std::sqrt(std::inner_product(row, row + dims, row, 0.0f));
      for (int64_t k = 0; k < dims; ++k) row[k] /= norm;
    }
  }
  std::ofstream npy(f.dir + "/" + kVectorsFile, std::ios::binary);
  npy << npy_f32_header(rows + torn_rows, dims);
  npy.write(reinterpret_cast<const char*>(all.data()), static_cast<std::streamsize>(all.size() * sizeof(float)));
  std::ofstream ids(f.dir + "/" + kIdsFile, std::ios::binary);
  for (int64_t r = 0; r < rows + torn_rows; ++r) {
    const std::string id = "doc-" + std::to_string(r) + (r % 3 == 0 ? " \"q\"\n\xC3\xA9" : "");
    ids << nlohmann::json(id).dump() << "\n";
    if (r < rows) f.ids.push_back(id);
  }
  std::ofstream(f.dir + "/" + kMetadataFile)
      << nlohmann::json{{"model", "m"},      {"space_id", "s1"},   {"dims", dims}, {"normalized", normalized},
                        {"pooling", "mean"}, {"precision", "f32"}, {"docs", rows}}
             .dump();
  std::ofstream(f.dir + "/" + kCheckpointFile) << nlohmann::json{{"docs", rows}, {"resume_token", ""}}.dump();
  f.vectors.assign(all.begin(), all.begin() + rows * dims);
  return f;
}

// Brute-force top k: (row, score), closest first.
std::vector<SearchHit> brute_force(const Folder& f, const float* q, int64_t k, bool inner_product) {
  std::vector<SearchHit> all;
  const int64_t rows = static_cast<int64_t>(f.ids.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = f.vectors.data() + r * f.dims;
    float s = 0;
    for (int64_t j = 0; j < f.dims; ++j) s += inner_product ? q[j] * v[j] : (q[j] - v[j]) * (q[j] - v[j]);
    all.push_back({r, s});
  }
  std::sort(all.begin(), all.end(), [&](const SearchHit& a, const SearchHit& b) {
    return inner_product ? a.score > b.score : a.score < b.score;
  });
  all.resize(static_cast<size_t>(std::min<int64_t>(k, rows)));
  return all;
}

TEST(VectorIndex, NpyHeaderRoundTrip) {
  const std::string h = npy_f32_header(1234567, 384);
  ASSERT_EQ(static_cast<int64_t>(h.size()), kNpyHeaderBytes);
  EXPECT_EQ(h.back(), '\n');
  auto s = parse_npy_f32_header(h);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  EXPECT_EQ(s->rows, 1234567);
  EXPECT_EQ(s->cols, 384);
  EXPECT_EQ(s->data_offset, kNpyHeaderBytes);
  // Format 2.0 (a 4-byte header length), as numpy writes for long headers.
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  dict.resize(128 - 12 - 1, ' ');
  dict += '\n';
  const std::string v2 =
      std::string("\x93NUMPY\x02\x00", 8) + static_cast<char>(dict.size()) + std::string(3, '\0') + dict;
  auto n = parse_npy_f32_header(v2);
  ASSERT_TRUE(n.has_value()) << n.status().message();
  EXPECT_EQ(n->rows, 2);
  EXPECT_EQ(n->cols, 3);
  EXPECT_EQ(n->data_offset, 128);
  std::string one_d = h;
  one_d.replace(one_d.find("(1234567, 384)"), 14, "(5,)          ");
  EXPECT_NE(parse_npy_f32_header(one_d).status().message().find("not 2-D"), std::string::npos);

  std::string f8 = h;
  f8.replace(f8.find("<f4"), 3, "<f8");
  EXPECT_EQ(parse_npy_f32_header(f8).status().code(), StatusCode::data_loss);
  EXPECT_FALSE(parse_npy_f32_header("not numpy at all").has_value());
  EXPECT_FALSE(parse_npy_f32_header(h.substr(0, 40)).has_value());
}

TEST(VectorIndex, InnerProductMatchesBruteForce) {
  Folder f = make_folder("vector_index_ip", 500, 16, /*normalized=*/true);
  auto index = VectorIndex::load(f.dir);
  ASSERT_TRUE(index.has_value()) << index.status().message();
  const VectorIndex& vi = *index.value();
  EXPECT_EQ(vi.size(), 500);
  EXPECT_EQ(vi.dims(), 16);
  EXPECT_EQ(vi.metric(), IndexMetric::inner_product);
  EXPECT_EQ(vi.info().space_id, "s1");
  for (int64_t r = 0; r < 500; ++r) ASSERT_EQ(vi.id(r), f.ids[static_cast<size_t>(r)]);

  // Three queries at once: rows 3, 250 and 499 themselves.
  std::vector<float> queries;
  for (int64_t r : {3, 250, 499})
    queries.insert(queries.end(), f.vectors.begin() + r * 16, f.vectors.begin() + (r + 1) * 16);
  auto hits = vi.search(queries, 5);
  ASSERT_TRUE(hits.has_value()) << hits.status().message();
  ASSERT_EQ(hits->size(), 3u);
  const int64_t self[] = {3, 250, 499};
  for (size_t q = 0; q < 3; ++q) {
    ASSERT_EQ((*hits)[q].size(), 5u);
    EXPECT_EQ((*hits)[q][0].row, self[q]);
    EXPECT_NEAR((*hits)[q][0].score, 1.0f, 1e-5);
    const auto want = brute_force(f, queries.data() + q * 16, 5, true);
    for (size_t j = 0; j < 5; ++j) {
      EXPECT_EQ((*hits)[q][j].row, want[j].row);
      EXPECT_NEAR((*hits)[q][j].score, want[j].score, 1e-5);
    }
  }
}

TEST(VectorIndex, L2ForUnnormalisedFolders) {
  Folder f = make_folder("vector_index_l2", 200, 8, /*normalized=*/false);
  auto index = VectorIndex::load(f.dir);
  ASSERT_TRUE(index.has_value()) << index.status().message();
  EXPECT_EQ(index.value()->metric(), IndexMetric::l2);
  EXPECT_EQ(index_metric_name(index.value()->metric()), "l2");
  std::vector<float> q(f.vectors.begin() + 17 * 8, f.vectors.begin() + 18 * 8);
  q[0] += 0.01f;
  auto hits = index.value()->search(q, 4);
  ASSERT_TRUE(hits.has_value());
  const auto want = brute_force(f, q.data(), 4, false);
  ASSERT_EQ((*hits)[0].size(), 4u);
  EXPECT_EQ((*hits)[0][0].row, 17);
  EXPECT_NEAR((*hits)[0][0].score, 1e-4f, 1e-5);
  for (size_t j = 0; j < 4; ++j) EXPECT_EQ((*hits)[0][j].row, want[j].row);
}

TEST(VectorIndex, BadQueriesAndSmallIndexes) {
  Folder f = make_folder("vector_index_small", 3, 4, true);
  auto index = VectorIndex::load(f.dir);
  ASSERT_TRUE(index.has_value());
  std::vector<float> q(f.vectors.begin(), f.vectors.begin() + 4);
  auto hits = index.value()->search(q, 10);  // k clamped to the 3 rows
  ASSERT_TRUE(hits.has_value());
  EXPECT_EQ((*hits)[0].size(), 3u);
  EXPECT_EQ(index.value()->search(q, 0).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(index.value()->search(std::vector<float>(5, 0.f), 1).status().code(), StatusCode::invalid_argument);
  EXPECT_EQ(index.value()->search({}, 1).status().code(), StatusCode::invalid_argument);

  Folder empty = make_folder("vector_index_empty", 0, 4, true);
  auto none = VectorIndex::load(empty.dir);
  ASSERT_TRUE(none.has_value()) << none.status().message();
  auto no_hits = none.value()->search(q, 3);
  ASSERT_TRUE(no_hits.has_value());
  EXPECT_TRUE((*no_hits)[0].empty());
}

// Rows past the checkpoint (a job killed mid-batch) are not searched.
TEST(VectorIndex, OnlyCommittedRows) {
  Folder f = make_folder("vector_index_torn", 50, 8, true, /*torn_rows=*/7);
  auto index = VectorIndex::load(f.dir);
  ASSERT_TRUE(index.has_value()) << index.status().message();
  EXPECT_EQ(index.value()->size(), 50);
  auto built = VectorIndex::build(f.dir);
  ASSERT_TRUE(built.has_value()) << built.status().message();
  EXPECT_EQ(built.value(), 50);
}

TEST(VectorIndex, BuildWritesIndexFaissAndStaleOnesAreIgnored) {
  Folder f = make_folder("vector_index_build", 300, 12, true);
  auto rows = VectorIndex::build(f.dir);
  ASSERT_TRUE(rows.has_value()) << rows.status().message();
  EXPECT_EQ(rows.value(), 300);
  ASSERT_TRUE(fs::exists(f.dir + "/" + kIndexFile));
  EXPECT_FALSE(fs::exists(f.dir + "/" + kIndexFile + std::string(".tmp")));
  std::vector<float> q(f.vectors.begin() + 40 * 12, f.vectors.begin() + 41 * 12);
  auto from_file = VectorIndex::load(f.dir);
  ASSERT_TRUE(from_file.has_value()) << from_file.status().message();
  auto hits = from_file.value()->search(q, 3);
  ASSERT_TRUE(hits.has_value());
  EXPECT_EQ((*hits)[0][0].row, 40);

  // The folder grows (a resumed job) but index.faiss still holds 300 rows: not used.
  Folder bigger = make_folder("vector_index_build_stale", 400, 12, true);
  fs::copy_file(f.dir + "/" + kIndexFile, bigger.dir + "/" + kIndexFile);
  auto stale = VectorIndex::load(bigger.dir);
  ASSERT_TRUE(stale.has_value()) << stale.status().message();
  EXPECT_EQ(stale.value()->size(), 400);
  std::vector<float> q2(bigger.vectors.begin() + 350 * 12, bigger.vectors.begin() + 351 * 12);
  auto hits2 = stale.value()->search(q2, 1);
  ASSERT_TRUE(hits2.has_value());
  EXPECT_EQ((*hits2)[0][0].row, 350);
}

TEST(VectorIndex, FolderErrors) {
  const std::string dir = test::scratch_dir("vector_index_errors");
  auto none = VectorIndex::load(dir);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.status().code(), StatusCode::not_found);
  EXPECT_NE(none.status().message().find("not an embedding folder"), std::string::npos);

  Folder f = make_folder("vector_index_short_ids", 10, 4, true);
  std::ofstream(f.dir + "/" + kIdsFile, std::ios::trunc) << "\"only one\"\n";
  auto short_ids = VectorIndex::load(f.dir);
  ASSERT_FALSE(short_ids.has_value());
  EXPECT_EQ(short_ids.status().code(), StatusCode::data_loss);

  Folder g = make_folder("vector_index_short_npy", 10, 4, true);
  fs::resize_file(g.dir + "/" + kVectorsFile, kNpyHeaderBytes + 4 * 4 * 5);
  std::ofstream(g.dir + "/" + kVectorsFile, std::ios::in | std::ios::out | std::ios::binary) << npy_f32_header(5, 4);
  auto short_npy = VectorIndex::load(g.dir);
  ASSERT_FALSE(short_npy.has_value());
  EXPECT_NE(short_npy.status().message().find("fewer than the 10 committed"), std::string::npos)
      << short_npy.status().message();
}

}  // namespace
}  // namespace prism::pipelines::search
