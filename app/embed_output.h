// app/embed_output.h: the output folder of a bulk embedding job, written so that a job killed
// at any instant (kill -9, power loss) resumes with exactly one vector per document.
//   vectors.npy    float32 [docs, dims], C order (numpy.load reads it)
//   ids.jsonl      one JSON string per line: the document ids, row i of vectors.npy is line i
//   metadata.json  model, embedding space id, dims, normalisation, pooling, precision, docs
//   checkpoint.json  the committed document count, the bytes of each file that hold it, and
//                  the job's resume token (e.g. the input byte offset of the next document)
// NOTE: appends go to the data files first, which are then fsynced; only then is
// checkpoint.json replaced atomically (write + fsync + rename). Whatever lies past the
// checkpoint's byte counts is a torn write: resume truncates it. The .npy header has a fixed
// size and is rewritten with the committed row count at each checkpoint.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace prism::app {

struct EmbeddingMetadata {
  std::string model;      // the model directory as given
  std::string space_id;   // EmbedFrontend::space_id()
  int64_t dims = 0;       // vector length written
  bool normalized = false;
  std::string pooling;    // "cls", "mean", "last_token"
  std::string precision;  // "f32", "bf16", "int8"
};

class EmbeddingOutput {
 public:
  // Opens `dir` for a job. A dir holding a job of another space id or dims is refused either
  // way (failed_precondition "made in another embedding space"). resume == false: dir must be
  // absent or empty (failed_precondition otherwise, suggesting --resume). resume == true: an
  // absent or empty dir starts a new job; a job's dir must also match `meta`'s precision
  // (bf16 rows must not join f32 ones); the files are truncated to the last checkpoint.
  // The dir stays locked (flock) while the object lives: a second writer is refused.
  static Result<std::unique_ptr<EmbeddingOutput>> open(const std::string& dir, const EmbeddingMetadata& meta,
                                                       bool resume);
  ~EmbeddingOutput();

  int64_t committed() const;                  // documents covered by the last checkpoint
  const std::string& resume_token() const;    // as given to the last checkpoint ("" when none)
  // Appends rows (ids.size() * dims floats). Not durable until checkpoint().
  Status append(std::span<const std::string> ids, std::span<const float> vectors);
  // Makes everything appended durable and records `resume_token` with it.
  Status checkpoint(const std::string& resume_token);
  int64_t appended() const;                   // committed + rows since the last checkpoint
  const std::string& dir() const;

 private:
  struct Impl;
  explicit EmbeddingOutput(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace prism::app
