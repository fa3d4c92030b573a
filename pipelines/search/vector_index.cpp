// pipelines/search/vector_index.cpp: the embedding folder's readers and a flat FAISS index.
// NOTE: FAISS throws (faiss::FaissException, std::bad_alloc): every call into it is wrapped
// here and turned into a Status. Debian's libfaiss calls the system BLAS (sgemm) for batches
// of 20+ queries; when that BLAS is OpenBLAS it would start its own thread pool next to our
// OpenMP one, so its thread count is pinned to 1 before the first search (limit_blas_threads).
#include "pipelines/search/vector_index.h"

#include <dlfcn.h>
#include <faiss/IndexFlat.h>
#include <faiss/index_io.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/log.h"

namespace prism::pipelines::search {

namespace fs = std::filesystem;

struct VectorIndex::Faiss {
  std::unique_ptr<faiss::IndexFlat> index;
};

namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr int64_t kBuildChunkRows = 16384;  // rows read from vectors.npy per FAISS add

// OpenBLAS (if the system BLAS is OpenBLAS) must not start a second pool: see the file note.
// Reference BLAS and BLIS-serial have no threads, so a missing symbol is fine.
void limit_blas_threads() {
  static std::once_flag once;
  std::call_once(once, [] {
    using SetThreads = void (*)(int);
    if (auto fn = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
      fn(1);
      PRISM_LOG_INFO("vector index: OpenBLAS limited to 1 thread (FAISS runs on the OpenMP pool)");
    }
  });
}

std::string path_in(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

Result<nlohmann::json> read_json_file(const std::string& path) {
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return data_loss(path + " is not a JSON object");
  return j;
}

// Value text after "'key':" in a numpy header dict, up to the next top-level ',' or '}'.
std::string_view dict_value(std::string_view dict, std::string_view key) {
  std::string quoted(1, '\'');
  quoted.append(key).push_back('\'');
  size_t p = dict.find(quoted);
  if (p == std::string_view::npos) return {};
  p = dict.find(':', p + quoted.size());
  if (p == std::string_view::npos) return {};
  ++p;
  while (p < dict.size() && dict[p] == ' ') ++p;
  size_t end = p;
  int depth = 0;
  for (; end < dict.size(); ++end) {
    const char c = dict[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    if (depth < 0) break;
  }
  std::string_view v = dict.substr(p, end - p);
  while (!v.empty() && v.back() == ' ') v.remove_suffix(1);
  return v;
}

bool parse_int(std::string_view s, int64_t& out) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size() && out >= 0;
}

Status write_atomically(const std::string& path, const std::function<Status(FILE*)>& write) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return internal_error("cannot create " + tmp + ": " + std::strerror(errno));
  Status s = write(f);
  if (s.ok() && (std::fflush(f) != 0 || ::fsync(fileno(f)) != 0))
    s = internal_error("cannot write " + tmp + ": " + std::strerror(errno));
  std::fclose(f);
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = internal_error("cannot rename " + tmp + ": " + std::strerror(errno));
  if (!s.ok()) {
    std::remove(tmp.c_str());
    return s;
  }
  if (int dfd = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Result<std::vector<std::string>> read_ids(const std::string& path, int64_t rows) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::vector<std::string> ids;
  ids.reserve(static_cast<size_t>(rows));
  std::string line;
  for (int64_t i = 0; i < rows; ++i) {
    if (!std::getline(in, line))
      return data_loss(path + " has " + std::to_string(i) + " lines, fewer than the " + std::to_string(rows) +
                       " committed documents");
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_string()) return data_loss(path + ":" + std::to_string(i + 1) + ": not a JSON string");
    ids.push_back(j.get<std::string>());
  }
  return ids;
}

// Streams the committed rows of vectors.npy into a new flat index.
Result<std::unique_ptr<faiss::IndexFlat>> build_flat(const std::string& dir, const EmbeddingFolderInfo& info,
                                                     IndexMetric metric) {
  const std::string path = path_in(dir, kVectorsFile);
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::string header(kNpyHeaderBytes, '\0');
  in.read(header.data(), kNpyHeaderBytes);
  header.resize(static_cast<size_t>(in.gcount()));
  PRISM_ASSIGN_OR_RETURN(NpyF32Shape shape, parse_npy_f32_header(header));
  if (shape.cols != info.dims)
    return data_loss(path + " has " + std::to_string(shape.cols) + " columns, metadata.json says " +
                     std::to_string(info.dims));
  if (shape.rows < info.docs)
    return data_loss(path + " holds " + std::to_string(shape.rows) + " rows, fewer than the " +
                     std::to_string(info.docs) + " committed documents");
  in.seekg(shape.data_offset);
  try {
    std::unique_ptr<faiss::IndexFlat> index;
    if (metric == IndexMetric::inner_product)
      index = std::make_unique<faiss::IndexFlatIP>(info.dims);
    else
      index = std::make_unique<faiss::IndexFlatL2>(info.dims);
    std::vector<float> chunk;
    for (int64_t done = 0; done < info.docs;) {
      const int64_t n = std::min(kBuildChunkRows, info.docs - done);
      chunk.resize(static_cast<size_t>(n * info.dims));
      in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(chunk.size() * sizeof(float)));
      if (in.gcount() != static_cast<std::streamsize>(chunk.size() * sizeof(float)))
        return data_loss(path + " ends before its committed rows");
      index->add(n, chunk.data());
      done += n;
    }
    return index;
  } catch (const std::exception& e) {
    return internal_error(std::string("FAISS: ") + e.what());
  }
}

IndexMetric metric_of(const EmbeddingFolderInfo& info) {
  return info.normalized ? IndexMetric::inner_product : IndexMetric::l2;
}

faiss::MetricType faiss_metric(IndexMetric m) {
  return m == IndexMetric::inner_product ? faiss::METRIC_INNER_PRODUCT : faiss::METRIC_L2;
}

// index.faiss when it exists and covers exactly this folder; null (with a warning when the
// file exists) otherwise.
std::unique_ptr<faiss::IndexFlat> read_matching_index(const std::string& dir, const EmbeddingFolderInfo& info,
                                                      IndexMetric metric) {
  const std::string path = path_in(dir, kIndexFile);
  if (!fs::exists(path)) return nullptr;
  try {
    std::unique_ptr<faiss::Index> any(faiss::read_index(path.c_str()));
    auto* flat = dynamic_cast<faiss::IndexFlat*>(any.get());
    if (flat != nullptr && flat->ntotal == info.docs && flat->d == info.dims &&
        flat->metric_type == faiss_metric(metric)) {
      any.release();
      return std::unique_ptr<faiss::IndexFlat>(flat);
    }
    PRISM_LOG_WARN("{} does not match the folder's {} committed vectors: rebuilding it in memory", path, info.docs);
  } catch (const std::exception& e) {
    PRISM_LOG_WARN("cannot read {} ({}): rebuilding it in memory", path, e.what());
  }
  return nullptr;
}

}  // namespace

std::string npy_f32_header(int64_t rows, int64_t cols) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                     std::to_string(cols) + "), }";
  const size_t dict_bytes = kNpyHeaderBytes - 10;  // magic (6), version (2), length (2)
  dict.resize(dict_bytes - 1, ' ');
  dict.push_back('\n');
  std::string h(kNpyMagic, 6);
  h.push_back('\x01');
  h.push_back('\x00');
  h.push_back(static_cast<char>(dict_bytes & 0xff));
  h.push_back(static_cast<char>(dict_bytes >> 8));
  return h + dict;
}

Result<NpyF32Shape> parse_npy_f32_header(std::string_view bytes) {
  if (bytes.size() < 10 || bytes.substr(0, 6) != std::string_view(kNpyMagic, 6))
    return data_loss("not a .npy file (no \\x93NUMPY magic)");
  const auto u8 = [&](size_t i) { return static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])); };
  const int major = static_cast<int>(u8(6));
  size_t prefix = 10, dict_len = u8(8) | (u8(9) << 8);
  if (major == 2 || major == 3) {
    if (bytes.size() < 12) return data_loss(".npy header is truncated");
    prefix = 12;
    dict_len = u8(8) | (u8(9) << 8) | (u8(10) << 16) | (u8(11) << 24);
  } else if (major != 1) {
    return data_loss(".npy format version " + std::to_string(major) + " is not supported");
  }
  if (bytes.size() < prefix + dict_len) return data_loss(".npy header is truncated");
  const std::string_view dict = bytes.substr(prefix, dict_len);
  if (dict_value(dict, "descr") != "'<f4'") return data_loss(".npy array is not little-endian float32 ('<f4')");
  if (dict_value(dict, "fortran_order") != "False") return data_loss(".npy array is not in C order");
  std::string_view shape = dict_value(dict, "shape");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return data_loss(".npy header has no shape");
  shape = shape.substr(1, shape.size() - 2);
  const size_t comma = shape.find(',');
  NpyF32Shape out;
  out.data_offset = static_cast<int64_t>(prefix + dict_len);
  std::string_view cols = comma == std::string_view::npos ? std::string_view() : shape.substr(comma + 1);
  if (!cols.empty() && cols.back() == ',') cols.remove_suffix(1);
  if (comma == std::string_view::npos || !parse_int(shape.substr(0, comma), out.rows) || !parse_int(cols, out.cols))
    return data_loss(".npy array is not 2-D: shape (" + std::string(shape) + ")");
  return out;
}

Result<EmbeddingFolderInfo> read_embedding_folder(const std::string& dir) {
  const std::string meta_path = path_in(dir, kMetadataFile);
  if (!fs::exists(meta_path))
    return not_found(dir + " is not an embedding folder written by `prism embed` (no " + kMetadataFile + ")");
  PRISM_ASSIGN_OR_RETURN(nlohmann::json meta, read_json_file(meta_path));
  EmbeddingFolderInfo info;
  try {
    info.space_id = meta.at("space_id").get<std::string>();
    info.model = meta.value("model", std::string());
    info.precision = meta.value("precision", std::string());
    info.dims = meta.at("dims").get<int64_t>();
    info.normalized = meta.at("normalized").get<bool>();
  } catch (const nlohmann::json::exception& e) {
    return data_loss(meta_path + ": " + e.what());
  }
  if (info.dims <= 0) return data_loss(meta_path + ": dims must be positive");
  const std::string ckpt_path = path_in(dir, kCheckpointFile);
  if (fs::exists(ckpt_path)) {
    PRISM_ASSIGN_OR_RETURN(nlohmann::json ckpt, read_json_file(ckpt_path));
    const auto it = ckpt.find("docs");
    if (it == ckpt.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
      return data_loss(ckpt_path + ": 'docs' must be a non-negative integer");
    info.docs = it->get<int64_t>();
  }
  return info;
}

std::string_view index_metric_name(IndexMetric m) { return m == IndexMetric::inner_product ? "inner_product" : "l2"; }

VectorIndex::VectorIndex() = default;
VectorIndex::~VectorIndex() = default;

Result<std::unique_ptr<const VectorIndex>> VectorIndex::load(const std::string& dir) {
  limit_blas_threads();
  std::unique_ptr<VectorIndex> v(new VectorIndex());
  v->dir_ = dir;
  PRISM_ASSIGN_OR_RETURN(v->info_, read_embedding_folder(dir));
  v->metric_ = metric_of(v->info_);
  PRISM_ASSIGN_OR_RETURN(v->ids_, read_ids(path_in(dir, kIdsFile), v->info_.docs));
  v->faiss_ = std::make_unique<Faiss>();
  v->faiss_->index = read_matching_index(dir, v->info_, v->metric_);
  if (v->faiss_->index == nullptr) {
    PRISM_ASSIGN_OR_RETURN(v->faiss_->index, build_flat(dir, v->info_, v->metric_));
  }
  return std::unique_ptr<const VectorIndex>(std::move(v));
}

Result<int64_t> VectorIndex::build(const std::string& dir) {
  limit_blas_threads();
  PRISM_ASSIGN_OR_RETURN(EmbeddingFolderInfo info, read_embedding_folder(dir));
  PRISM_ASSIGN_OR_RETURN(std::unique_ptr<faiss::IndexFlat> index, build_flat(dir, info, metric_of(info)));
  PRISM_RETURN_IF_ERROR(write_atomically(path_in(dir, kIndexFile), [&](FILE* f) -> Status {
    try {
      faiss::write_index(index.get(), f);
      return {};
    } catch (const std::exception& e) {
      return internal_error(std::string("FAISS cannot write the index: ") + e.what());
    }
  }));
  return info.docs;
}

Result<std::vector<std::vector<SearchHit>>> VectorIndex::search(std::span<const float> queries, int64_t k) const {
  if (k < 1) return invalid_argument("k must be at least 1, got " + std::to_string(k));
  const int64_t d = dims();
  if (queries.empty() || queries.size() % static_cast<size_t>(d) != 0)
    return invalid_argument("query vectors hold " + std::to_string(queries.size()) +
                            " values, not a positive multiple of the index's " + std::to_string(d) + " dims");
  const int64_t nq = static_cast<int64_t>(queries.size()) / d;
  std::vector<std::vector<SearchHit>> out(static_cast<size_t>(nq));
  k = std::min(k, size());
  if (k == 0) return out;
  std::vector<float> scores(static_cast<size_t>(nq * k));
  std::vector<faiss::Index::idx_t> rows(static_cast<size_t>(nq * k));
  try {
    faiss_->index->search(nq, queries.data(), k, scores.data(), rows.data());
  } catch (const std::exception& e) {
    return internal_error(std::string("FAISS search failed: ") + e.what());
  }
  for (int64_t q = 0; q < nq; ++q) {
    for (int64_t j = 0; j < k; ++j) {
      const size_t i = static_cast<size_t>(q * k + j);
      if (rows[i] < 0) break;  // fewer than k rows exist
      out[static_cast<size_t>(q)].push_back({rows[i], scores[i]});
    }
  }
  return out;
}

}  // namespace prism::pipelines::search
