// app/embed_output.cpp: the crash-safe writer of a bulk job's output folder (layout in
// pipelines/search/vector_index.h, which its readers share).
// NOTE: the commit point is the rename of checkpoint.json. Before it, data files may hold
// any prefix of the rows appended since the previous checkpoint (and the .npy header any row
// count); resume cuts both files back to the byte counts checkpoint.json records, so each
// committed row is present exactly once and nothing uncommitted survives.
#include "app/embed_output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "pipelines/search/vector_index.h"

namespace prism::app {

namespace fs = std::filesystem;
using pipelines::search::kCheckpointFile;
using pipelines::search::kIdsFile;
using pipelines::search::kMetadataFile;
using pipelines::search::kNpyHeaderBytes;
using pipelines::search::kVectorsFile;

namespace {

std::string path_in(const std::string& dir, const char* file) { return (fs::path(dir) / file).string(); }

Status io_error(const std::string& what, const std::string& path) {
  return internal_error("cannot " + what + " " + path + ": " + std::strerror(errno));
}

// Writes all of `bytes` at `offset` (pwrite may write less than asked).
Status pwrite_all(int fd, const void* bytes, size_t size, int64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(bytes);
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, p, size, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("write", path);
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return {};
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return io_error("open", dir);
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status() : io_error("sync", dir);
}

// write + fsync + rename (+ fsync(dir) when the rename itself must be durable): readers see
// the old file or the new one, never a mix.
Status write_atomically(const std::string& dir, const char* file, const std::string& bytes, bool durable = true) {
  const std::string path = path_in(dir, file);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("create", tmp);
  Status s = pwrite_all(fd, bytes.data(), bytes.size(), 0, tmp);
  if (s.ok() && ::fsync(fd) != 0) s = io_error("sync", tmp);
  ::close(fd);
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0) s = io_error("rename", tmp);
  if (!s.ok() || !durable) return s;
  return fsync_dir(dir);
}

Result<int64_t> file_size(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return io_error("stat", path);
  return static_cast<int64_t>(st.st_size);
}

std::string metadata_json(const EmbeddingMetadata& m, int64_t docs) {
  nlohmann::json j = {{"format", "prism.embeddings"},
                      {"version", 1},
                      {"model", m.model},
                      {"space_id", m.space_id},
                      {"dims", m.dims},
                      {"normalized", m.normalized},
                      {"pooling", m.pooling},
                      {"precision", m.precision},
                      {"dtype", "float32"},
                      {"docs", docs}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

bool dir_is_empty(const std::string& dir) {
  std::error_code ec;
  return fs::is_empty(dir, ec) && !ec;
}

// The folder's job must be of our space, dims and (when resuming) precision.
Status check_same_space(const std::string& dir, const EmbeddingMetadata& meta, bool resume) {
  if (!fs::exists(path_in(dir, kMetadataFile))) {
    if (dir_is_empty(dir)) return {};
    return failed_precondition("output directory " + dir + " is not empty and holds no `prism embed` job (no " +
                               kMetadataFile + "): choose an empty or new directory");
  }
  Result<pipelines::search::EmbeddingFolderInfo> info = pipelines::search::read_embedding_folder(dir);
  if (!info.has_value())
    return failed_precondition("output directory " + dir + " holds a damaged job: " + info.status().message());
  if (info->space_id != meta.space_id || info->dims != meta.dims)
    return failed_precondition("output directory " + dir + " was made in another embedding space (space " +
                               info->space_id + ", " + std::to_string(info->dims) + " dims, model " + info->model +
                               "); this job is space " + meta.space_id + ", " + std::to_string(meta.dims) +
                               " dims: vectors of two spaces must not share a folder; choose another directory");
  if (!resume)
    return failed_precondition("output directory " + dir + " is not empty: it holds a job of " +
                               std::to_string(info->docs) +
                               " committed documents; pass --resume to continue it, or choose an empty directory");
  if (info->precision != meta.precision)
    return failed_precondition("output directory " + dir + " was written at precision " + info->precision +
                               "; resume it with --precision " + info->precision);
  return {};
}

}  // namespace

struct EmbeddingOutput::Impl {
  std::string dir;
  EmbeddingMetadata meta;
  int dir_fd = -1;  // holds the flock
  int vectors_fd = -1;
  int ids_fd = -1;
  std::string vectors_path, ids_path;
  // Committed (by the last checkpoint) and appended counts.
  int64_t committed_docs = 0, appended_docs = 0;
  int64_t committed_ids_bytes = 0, appended_ids_bytes = 0;
  std::string resume_token;
  std::string id_lines;  // scratch for append

  ~Impl() {
    for (int fd : {vectors_fd, ids_fd, dir_fd})
      if (fd >= 0) ::close(fd);
  }
  int64_t row_bytes() const { return meta.dims * static_cast<int64_t>(sizeof(float)); }
  int64_t vectors_bytes(int64_t docs) const { return kNpyHeaderBytes + docs * row_bytes(); }

  Status lock() {
    dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) return io_error("open", dir);
    if (::flock(dir_fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK)
        return failed_precondition("output directory " + dir + " is in use by another `prism embed` process");
      return io_error("lock", dir);
    }
    return {};
  }

  Status open_data_files() {
    vectors_path = path_in(dir, kVectorsFile);
    ids_path = path_in(dir, kIdsFile);
    vectors_fd = ::open(vectors_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (vectors_fd < 0) return io_error("open", vectors_path);
    ids_fd = ::open(ids_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (ids_fd < 0) return io_error("open", ids_path);
    return {};
  }

  // Cuts both data files back to the committed state and writes the .npy header for it.
  Status truncate_to_committed() {
    PRISM_ASSIGN_OR_RETURN(int64_t vsize, file_size(vectors_fd, vectors_path));
    PRISM_ASSIGN_OR_RETURN(int64_t isize, file_size(ids_fd, ids_path));
    const int64_t vwant = vectors_bytes(committed_docs);
    if (vsize < vwant && committed_docs > 0)
      return data_loss(vectors_path + " holds " + std::to_string(vsize) + " bytes, fewer than the " +
                       std::to_string(vwant) + " its checkpoint committed: the folder was damaged");
    if (isize < committed_ids_bytes)
      return data_loss(ids_path + " holds " + std::to_string(isize) + " bytes, fewer than the " +
                       std::to_string(committed_ids_bytes) + " its checkpoint committed: the folder was damaged");
    if (::ftruncate(vectors_fd, vwant) != 0) return io_error("truncate", vectors_path);
    if (::ftruncate(ids_fd, committed_ids_bytes) != 0) return io_error("truncate", ids_path);
    const std::string header = pipelines::search::npy_f32_header(committed_docs, meta.dims);
    PRISM_RETURN_IF_ERROR(pwrite_all(vectors_fd, header.data(), header.size(), 0, vectors_path));
    if (::fsync(vectors_fd) != 0) return io_error("sync", vectors_path);
    if (::fsync(ids_fd) != 0) return io_error("sync", ids_path);
    appended_docs = committed_docs;
    appended_ids_bytes = committed_ids_bytes;
    return fsync_dir(dir);
  }

  std::string checkpoint_json() const {
    nlohmann::json j = {{"version", 1},
                        {"docs", committed_docs},
                        {"vectors_bytes", vectors_bytes(committed_docs)},
                        {"ids_bytes", committed_ids_bytes},
                        {"resume_token", resume_token}};
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }

  // Reads checkpoint.json (absent: nothing committed yet) and checks it against the metadata.
  Status read_checkpoint() {
    const std::string path = path_in(dir, kCheckpointFile);
    if (!fs::exists(path)) return {};
    PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path));
    nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    try {
      committed_docs = j.at("docs").get<int64_t>();
      committed_ids_bytes = j.at("ids_bytes").get<int64_t>();
      resume_token = j.at("resume_token").get<std::string>();
      if (j.at("vectors_bytes").get<int64_t>() != vectors_bytes(committed_docs) || committed_docs < 0 ||
          committed_ids_bytes < 0)
        return data_loss(path + " is inconsistent with " + kMetadataFile + "'s dims");
    } catch (const nlohmann::json::exception& e) {
      return data_loss(path + " is malformed: " + e.what());
    }
    return {};
  }

  // A leftover *.tmp of an interrupted atomic write is garbage.
  void remove_temporaries() {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec))
      if (entry.path().extension() == ".tmp") fs::remove(entry.path(), ec);
  }
};

EmbeddingOutput::EmbeddingOutput(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EmbeddingOutput::~EmbeddingOutput() = default;

Result<std::unique_ptr<EmbeddingOutput>> EmbeddingOutput::open(const std::string& dir, const EmbeddingMetadata& meta,
                                                               bool resume) {
  if (meta.dims <= 0 || meta.space_id.empty()) return invalid_argument("embedding output needs dims and a space id");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return failed_precondition("cannot create output directory " + dir + (ec ? ": " + ec.message() : ""));
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->meta = meta;
  PRISM_RETURN_IF_ERROR(impl->lock());  // before looking: another writer may be creating files
  PRISM_RETURN_IF_ERROR(check_same_space(dir, meta, resume));
  const bool existing = fs::exists(path_in(dir, kMetadataFile));
  if (existing) {
    impl->remove_temporaries();
    PRISM_RETURN_IF_ERROR(impl->read_checkpoint());
  } else {
    // metadata.json first: once it exists the folder is a job, whatever else is missing.
    PRISM_RETURN_IF_ERROR(write_atomically(dir, kMetadataFile, metadata_json(meta, 0)));
  }
  PRISM_RETURN_IF_ERROR(impl->open_data_files());
  PRISM_RETURN_IF_ERROR(impl->truncate_to_committed());
  if (!existing || !fs::exists(path_in(dir, kCheckpointFile)))
    PRISM_RETURN_IF_ERROR(write_atomically(dir, kCheckpointFile, impl->checkpoint_json()));
  return std::unique_ptr<EmbeddingOutput>(new EmbeddingOutput(std::move(impl)));
}

int64_t EmbeddingOutput::committed() const { return impl_->committed_docs; }
int64_t EmbeddingOutput::appended() const { return impl_->appended_docs; }
const std::string& EmbeddingOutput::resume_token() const { return impl_->resume_token; }
const std::string& EmbeddingOutput::dir() const { return impl_->dir; }

Status EmbeddingOutput::append(std::span<const std::string> ids, std::span<const float> vectors) {
  Impl& m = *impl_;
  if (vectors.size() != ids.size() * static_cast<size_t>(m.meta.dims))
    return invalid_argument(std::to_string(vectors.size()) + " values for " + std::to_string(ids.size()) + " ids of " +
                            std::to_string(m.meta.dims) + " dims");
  if (ids.empty()) return {};
  m.id_lines.clear();
  for (const std::string& id : ids) {
    m.id_lines += nlohmann::json(id).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    m.id_lines.push_back('\n');
  }
  PRISM_RETURN_IF_ERROR(
      pwrite_all(m.vectors_fd, vectors.data(), vectors.size_bytes(), m.vectors_bytes(m.appended_docs), m.vectors_path));
  PRISM_RETURN_IF_ERROR(pwrite_all(m.ids_fd, m.id_lines.data(), m.id_lines.size(), m.appended_ids_bytes, m.ids_path));
  m.appended_docs += static_cast<int64_t>(ids.size());
  m.appended_ids_bytes += static_cast<int64_t>(m.id_lines.size());
  return {};
}

Status EmbeddingOutput::checkpoint(const std::string& resume_token) {
  Impl& m = *impl_;
  // The header may claim rows before checkpoint.json does: resume rewrites it (file note).
  const std::string header = pipelines::search::npy_f32_header(m.appended_docs, m.meta.dims);
  PRISM_RETURN_IF_ERROR(pwrite_all(m.vectors_fd, header.data(), header.size(), 0, m.vectors_path));
  if (::fdatasync(m.vectors_fd) != 0) return io_error("sync", m.vectors_path);
  if (::fdatasync(m.ids_fd) != 0) return io_error("sync", m.ids_path);
  const int64_t docs = m.committed_docs, ids_bytes = m.committed_ids_bytes;
  const std::string token = m.resume_token;
  m.committed_docs = m.appended_docs;
  m.committed_ids_bytes = m.appended_ids_bytes;
  m.resume_token = resume_token;
  if (Status s = write_atomically(m.dir, kCheckpointFile, m.checkpoint_json()); !s.ok()) {
    m.committed_docs = docs;  // still the last durable state
    m.committed_ids_bytes = ids_bytes;
    m.resume_token = token;
    return s;
  }
  // Informational copy of the count for people reading metadata.json; checkpoint.json rules,
  // so losing this rename to a power cut leaves an older, still valid, metadata.json.
  return write_atomically(m.dir, kMetadataFile, metadata_json(m.meta, m.committed_docs), /*durable=*/false);
}

}  // namespace prism::app
