// pipelines/search/vector_index.h: nearest-neighbour search over the output folder of a bulk
// embedding job (`prism embed`, written by app/embed_output), with FAISS. The folder layout is
// declared here, below both its writer (app/) and its readers (`prism search`, the search
// route in api/), so there is one definition of it.
// Must not: include runtime/ or models/ headers (api/ includes this one), or embed text: the
// caller turns queries into vectors of the folder's embedding space first.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace prism::pipelines::search {

// ---- The folder's files ----
inline constexpr const char* kVectorsFile = "vectors.npy";         // f32 [docs, dims], C order
inline constexpr const char* kIdsFile = "ids.jsonl";               // one JSON string per line
inline constexpr const char* kMetadataFile = "metadata.json";      // model, space id, dims, ...
inline constexpr const char* kCheckpointFile = "checkpoint.json";  // {"docs", byte counts, token}
inline constexpr const char* kIndexFile = "index.faiss";           // optional, built at the end

// NOTE: vectors.npy has a fixed-size header (format 1.0, padded with spaces) so its row count
// can be rewritten in place at every checkpoint without moving the data.
inline constexpr int64_t kNpyHeaderBytes = 128;
// The header of a little-endian float32 C-order [rows, cols] array: exactly kNpyHeaderBytes.
std::string npy_f32_header(int64_t rows, int64_t cols);
struct NpyF32Shape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t data_offset = 0;  // bytes before the first element
};
// Parses the header at the start of `bytes` (format 1.0-3.0; '<f4', C order, 2-D);
// data_loss naming what is wrong otherwise.
Result<NpyF32Shape> parse_npy_f32_header(std::string_view bytes);

// What a reader needs of metadata.json and checkpoint.json.
struct EmbeddingFolderInfo {
  std::string space_id;
  std::string model;
  std::string precision;
  int64_t dims = 0;
  bool normalized = false;
  int64_t docs = 0;  // committed by the last checkpoint (0 when there is none yet)
};
// not_found when dir holds no metadata.json; data_loss naming the file when it is malformed.
Result<EmbeddingFolderInfo> read_embedding_folder(const std::string& dir);

// Normalised vectors: inner product (= cosine similarity, higher is closer). Otherwise
// squared Euclidean distance (lower is closer).
enum class IndexMetric { inner_product, l2 };
std::string_view index_metric_name(IndexMetric m);  // "inner_product" | "l2"

struct SearchHit {
  int64_t row = 0;  // row of vectors.npy = line of ids.jsonl
  float score = 0;  // as IndexMetric says
};

// An exact (flat) index over the committed vectors of a folder, with their ids. Immutable
// after load; search() is thread-safe.
class VectorIndex {
 public:
  // Reads metadata.json, checkpoint.json and the committed lines of ids.jsonl, then
  // index.faiss when it matches the folder (same row count, dims and metric), else builds
  // the index in memory from vectors.npy (a warning says so when index.faiss is stale).
  static Result<std::unique_ptr<const VectorIndex>> load(const std::string& dir);
  // Builds index.faiss from the committed rows of vectors.npy, streamed in chunks, and
  // replaces the file atomically. Returns the rows indexed.
  static Result<int64_t> build(const std::string& dir);
  ~VectorIndex();

  // The k nearest rows of each query, closest first; k is clamped to size().
  // queries: [num_queries * dims()] f32 row-major, in the folder's embedding space.
  // invalid_argument when the length is not a multiple of dims() or k < 1.
  Result<std::vector<std::vector<SearchHit>>> search(std::span<const float> queries, int64_t k) const;

  const std::string& id(int64_t row) const { return ids_[static_cast<size_t>(row)]; }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t dims() const { return info_.dims; }
  IndexMetric metric() const { return metric_; }
  const EmbeddingFolderInfo& info() const { return info_; }
  const std::string& dir() const { return dir_; }

 private:
  struct Faiss;  // the faiss::Index, kept out of this header
  VectorIndex();
  std::string dir_;
  EmbeddingFolderInfo info_;
  IndexMetric metric_ = IndexMetric::inner_product;
  std::vector<std::string> ids_;
  std::unique_ptr<Faiss> faiss_;
};

}  // namespace prism::pipelines::search
