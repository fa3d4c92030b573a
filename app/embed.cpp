// app/embed.cpp: `prism embed`. Three threads: the reader (read + tokenize the next batch),
// the calling thread (submit batches to the in-process embed deployment, append their vectors
// in input order, checkpoint, report) and the deployment's replica (embed on the OpenMP pool).
// NOTE: a checkpoint is taken only between whole batches, and batches are cut by a pure rule
// (token budget) from the resume point on, so a resumed run forms exactly the batches the
// uninterrupted run would have formed after that point: same model inputs, same vectors.
// Each batch is one request, which the deployment runs as one engine call (app/embed_deployment.h).
#include "app/embed.h"

#include <fcntl.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "app/embed_deployment.h"
#include "app/embed_input.h"
#include "app/embed_output.h"
#include "app/progress.h"
#include "frontends/embed_frontend.h"
#include "pipelines/search/vector_index.h"
#include "runtime/ops.h"

namespace prism::app {

namespace {

using Clock = std::chrono::steady_clock;
using frontends::EmbedFrontend;

constexpr int kQueueBatches = 2;          // read ahead: one batch being filled, two waiting
constexpr int kInFlightBatches = 3;       // in the deployment: one embedding, two queued behind it
constexpr int64_t kTailHashBytes = 4096;  // input bytes before the resume offset, fingerprinted

std::atomic<bool> g_interrupted{false};
extern "C" void on_interrupt(int) { g_interrupted.store(true); }

int fail(const std::string& message) {
  std::fprintf(stderr, "prism embed: %s\n", message.c_str());
  return 1;
}

// A batch the reader hands over: documents tokenized, the input position after them, and the
// error that stopped reading (after these documents), if any.
struct Batch {
  std::vector<std::string> ids;
  std::vector<std::vector<int32_t>> sequences;
  InputPosition end;
  int64_t skipped_empty = 0;
  int64_t tokens = 0;
  bool last = false;  // the input ended (or an error stopped it) after this batch
  Status error;
};

// Bounded hand-over between the reader thread and the embedding thread.
class BatchQueue {
 public:
  explicit BatchQueue(size_t capacity) : capacity_(capacity) {}
  // false when closed (the consumer gave up): the producer stops.
  bool push(Batch b) {
    std::unique_lock lock(mu_);
    not_full_.wait(lock, [&] { return closed_ || items_.size() < capacity_; });
    if (closed_) return false;
    items_.push_back(std::move(b));
    lock.unlock();
    not_empty_.notify_one();
    return true;
  }
  Batch pop() {
    std::unique_lock lock(mu_);
    not_empty_.wait(lock, [&] { return !items_.empty(); });
    Batch b = std::move(items_.front());
    items_.pop_front();
    lock.unlock();
    not_full_.notify_one();
    return b;
  }
  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    not_full_.notify_all();
  }

 private:
  const size_t capacity_;
  std::mutex mu_;
  std::condition_variable not_full_, not_empty_;
  std::deque<Batch> items_;
  bool closed_ = false;
};

bool is_empty_text(const std::string& text) {
  for (unsigned char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') return false;
  return true;
}

// The reader thread: fills batches of about batch_tokens tokens until the input ends, an
// error stops it, or the queue is closed.
void read_batches(DocumentReader& reader, const EmbedFrontend& frontend, const EmbedOptions& o, BatchQueue& queue) {
  InputDocument doc;
  for (;;) {
    Batch b;
    b.end = reader.position();  // NOTE: moves only past documents this batch takes (or skips)
    while (b.tokens < o.batch_tokens) {
      Result<bool> got = reader.next(doc);
      if (!got.has_value()) {
        b.error = got.status();
        break;
      }
      if (!got.value()) {
        b.end = reader.position();  // the end of the input (blank lines included)
        b.last = true;
        break;
      }
      const std::string where = reader.path() + ":" + std::to_string(doc.line);
      if (is_empty_text(doc.text)) {
        if (!o.skip_empty) {
          b.error = invalid_argument(where + ": document '" + doc.id +
                                     "' is empty (pass --skip-empty to skip empty documents)");
          break;
        }
        ++b.skipped_empty;
        b.end = reader.position();
        continue;
      }
      Result<std::vector<int32_t>> ids = frontend.tokenize(doc.text, o.truncate);
      if (!ids.has_value()) {
        b.error = invalid_argument(where + ": document '" + doc.id + "' " + ids.status().message());
        break;
      }
      b.tokens += static_cast<int64_t>(ids->size());
      b.sequences.push_back(std::move(ids).value());
      b.ids.push_back(std::move(doc.id));
      b.end = reader.position();
    }
    if (!b.error.ok()) b.last = true;
    const bool last = b.last;
    if (!queue.push(std::move(b)) || last) return;
  }
}

// XXH64 of the up to kTailHashBytes input bytes before `offset`, hex: proves on resume that
// the input is the one the job started with (at least where it resumes).
Result<std::string> tail_hash(const std::string& path, int64_t offset) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open input " + path);
  const int64_t begin = std::max<int64_t>(0, offset - kTailHashBytes);
  std::string bytes(static_cast<size_t>(offset - begin), '\0');
  const ssize_t n = ::pread(fd, bytes.data(), bytes.size(), begin);
  ::close(fd);
  if (n != static_cast<ssize_t>(bytes.size())) return data_loss("cannot read input " + path);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(bytes.data(), bytes.size(), 0)));
  return std::string(hex);
}

Result<std::string> resume_token(const std::string& input, const InputPosition& p) {
  PRISM_ASSIGN_OR_RETURN(std::string hash, tail_hash(input, p.offset));
  return nlohmann::json{
      {"input", input}, {"offset", p.offset}, {"line", p.line}, {"record", p.record}, {"tail_xxh64", hash}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Where a resumed job starts in its input; the start for a new one.
Result<InputPosition> resume_position(const std::string& token, const std::string& input) {
  if (token.empty()) return InputPosition{};
  nlohmann::json j = nlohmann::json::parse(token, nullptr, /*allow_exceptions=*/false);
  InputPosition p;
  std::string hash, was;
  try {
    p.offset = j.at("offset").get<int64_t>();
    p.line = j.at("line").get<int64_t>();
    p.record = j.at("record").get<int64_t>();
    hash = j.at("tail_xxh64").get<std::string>();
    was = j.value("input", std::string());
  } catch (const nlohmann::json::exception&) {
    return data_loss("the output's checkpoint holds no input position this version understands");
  }
  Result<std::string> now = tail_hash(input, p.offset);
  if (!now.has_value() || now.value() != hash)
    return failed_precondition("input " + input + " is not the input this job started with (" + was +
                               "): its bytes before the resume offset " + std::to_string(p.offset) +
                               " differ; resume with the same input");
  return p;
}

// A batch handed to the deployment and not yet written. Its sequences went with the request.
struct InFlight {
  Batch batch;
  std::optional<EmbedVectors> vectors;  // none: the batch has no document to embed
};

// One run of a job: what it reads, embeds with and writes, and its counts.
struct Job {
  explicit Job(const EmbedOptions& options) : o(options) {}
  const EmbedOptions& o;
  std::shared_ptr<const EmbedFrontend> frontend;
  std::unique_ptr<EmbeddingOutput> output;
  std::unique_ptr<DocumentReader> reader;  // read by the reader thread only, once running
  std::unique_ptr<EmbedDeployment> deployment;
  int64_t dims = 0;
  int64_t start_docs = 0;      // committed before this run
  InputPosition start;         // where this run started reading
  InputPosition committed_at;  // input position of the last checkpoint
  Clock::time_point last_checkpoint = Clock::now();
  int64_t skipped_empty = 0, tokens = 0;

  Status checkpoint(const InputPosition& at) {
    PRISM_ASSIGN_OR_RETURN(std::string token, resume_token(o.input, at));
    PRISM_RETURN_IF_ERROR(output->checkpoint(token));
    committed_at = at;
    last_checkpoint = Clock::now();
    return {};
  }

  bool checkpoint_due() const {
    return output->appended() - output->committed() >= o.checkpoint_every ||
           std::chrono::duration<double>(Clock::now() - last_checkpoint).count() >= o.checkpoint_seconds;
  }

  // Hands the batch's documents to the deployment (none: nothing to embed, e.g. all skipped).
  Result<InFlight> submit(Batch b) {
    InFlight f;
    if (!b.sequences.empty()) {
      PRISM_ASSIGN_OR_RETURN(f.vectors, deployment->submit(std::move(b.sequences), o.dimensions));
    }
    f.batch = std::move(b);
    return f;
  }

  // Waits for the batch's vectors, appends them, and checkpoints when due.
  Status consume(InFlight& f) {
    const Batch& b = f.batch;
    if (f.vectors.has_value()) {
      PRISM_ASSIGN_OR_RETURN(std::vector<float> vectors, f.vectors->get());
      PRISM_RETURN_IF_ERROR(output->append(b.ids, vectors));
      tokens += b.tokens;
    }
    skipped_empty += b.skipped_empty;
    if (b.last || checkpoint_due()) PRISM_RETURN_IF_ERROR(checkpoint(b.end));
    return {};
  }
};

Status check_options(const EmbedOptions& o) {
  if (o.batch_tokens < 1) return invalid_argument("--batch-tokens must be at least 1");
  if (o.checkpoint_every < 1) return invalid_argument("--checkpoint-every must be at least 1");
  if (o.checkpoint_seconds <= 0) return invalid_argument("--checkpoint-seconds must be positive");
  if (o.dimensions < 0) return invalid_argument("--dimensions must be positive");
  return {};
}

Status open_job(Job& job) {
  const EmbedOptions& o = job.o;
  PRISM_RETURN_IF_ERROR(check_options(o));
  PRISM_ASSIGN_OR_RETURN(InputFormat format, input_format_of(o.input));
  PRISM_ASSIGN_OR_RETURN(ops::Precision precision, ops::parse_precision(o.precision));
  PRISM_ASSIGN_OR_RETURN(job.deployment, EmbedDeployment::start({o.model, o.precision, o.batch_tokens}));
  job.frontend = job.deployment->frontend();
  const EmbedFrontend& fe = *job.frontend;
  if (Status s = fe.check_dimensions(o.dimensions); !s.ok()) return invalid_argument("--dimensions: " + s.message());

  job.dims = o.dimensions > 0 ? o.dimensions : fe.dims();
  const EmbeddingMetadata meta{o.model,
                               fe.space_id(),
                               job.dims,
                               fe.normalize(),
                               std::string(configs::pooling_name(fe.pooling())),
                               std::string(ops::precision_name(precision))};
  PRISM_ASSIGN_OR_RETURN(job.output, EmbeddingOutput::open(o.output, meta, o.resume));
  job.start_docs = job.output->committed();
  PRISM_ASSIGN_OR_RETURN(job.start, resume_position(job.output->resume_token(), o.input));
  job.committed_at = job.start;
  InputOptions input_options;
  input_options.text_field = o.text_field;
  input_options.id_field = o.id_field;
  PRISM_ASSIGN_OR_RETURN(job.reader, DocumentReader::open(o.input, format, input_options, job.start));
  return {};
}

// The reader thread feeds the calling thread until the input ends, an error stops the job,
// or SIGINT/SIGTERM (then `interrupted`, after a checkpoint).
// NOTE: batches are written in input order: the oldest in flight first. On SIGINT/SIGTERM no
// new batch is submitted; those in flight are written, then the checkpoint is taken after them.
Status run_pipeline(Job& job, ProgressReporter& progress, bool& interrupted) {
  BatchQueue queue(kQueueBatches);
  std::thread reader_thread([&] { read_batches(*job.reader, *job.frontend, job.o, queue); });
  std::deque<InFlight> in_flight;
  bool reading = true;  // the last batch is not submitted yet
  Status status;
  for (;;) {
    const bool stopping = g_interrupted.load();
    if (!stopping && reading && static_cast<int>(in_flight.size()) < kInFlightBatches) {
      Batch b = queue.pop();
      reading = !b.last;
      Result<InFlight> f = job.submit(std::move(b));
      if (!f.has_value()) {
        status = f.status();
        break;
      }
      in_flight.push_back(std::move(f).value());
      continue;
    }
    if (in_flight.empty()) {  // interrupted with nothing in flight
      interrupted = true;
      status = job.checkpoint(job.committed_at);
      break;
    }
    InFlight f = std::move(in_flight.front());
    in_flight.pop_front();
    status = job.consume(f);
    if (status.ok()) status = f.batch.error;
    progress.update(job.output->appended(), f.batch.end.offset);
    if (!status.ok() || f.batch.last) break;
    if (stopping && in_flight.empty()) {
      interrupted = true;
      status = job.checkpoint(f.batch.end);
      break;
    }
  }
  queue.close();  // unblocks the reader if it waits to push
  reader_thread.join();
  progress.finish(job.output->committed(), job.committed_at.offset);
  return status;
}

void print_summary(const Job& job, double seconds) {
  const int64_t done = job.output->committed();
  const int64_t run_docs = done - job.start_docs;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);  // ru_maxrss: peak resident set, KiB
  std::fprintf(
      stderr, "prism embed: %s documents in %s (%s this run in %.1f s, %s docs/s, %s tokens/s, peak RSS %ld MiB)%s%s\n",
      format_count(done).c_str(), job.o.output.c_str(), format_count(run_docs).c_str(), seconds,
      format_count(seconds > 0 ? static_cast<int64_t>(run_docs / seconds) : 0).c_str(),
      format_count(seconds > 0 ? static_cast<int64_t>(job.tokens / seconds) : 0).c_str(), usage.ru_maxrss / 1024,
      job.skipped_empty > 0 ? (", " + format_count(job.skipped_empty) + " empty skipped").c_str() : "",
      job.o.faiss ? ", index.faiss written" : "");
}

}  // namespace

CLI::App* add_embed_command(CLI::App& app, EmbedOptions& o) {
  auto* cmd = app.add_subcommand("embed", "Bulk embedding job: a file of documents into vectors.npy + ids (resumable)");
  cmd->add_option("--model", o.model, "Hugging Face model directory of an embedding model")->required();
  cmd->add_option("--input", o.input, "Documents: .jsonl/.ndjson (objects or strings), .txt (a line each) or .csv")
      ->required();
  cmd->add_option("--output", o.output, "Output directory: vectors.npy, ids.jsonl, metadata.json, checkpoint.json")
      ->required();
  cmd->add_option("--precision", o.precision, "f32, bf16 or int8")->check(CLI::IsMember({"f32", "bf16", "int8"}));
  cmd->add_flag("--resume", o.resume, "Continue the job in --output after its last checkpoint");
  cmd->add_option("--batch-tokens", o.batch_tokens, "Tokens per model batch (default 2048)");
  cmd->add_option("--dimensions", o.dimensions, "Matryoshka: keep the first D dims and re-normalise");
  cmd->add_flag("--truncate", o.truncate, "Cut documents longer than the model's maximum instead of failing");
  cmd->add_option("--text-field", o.text_field, "JSONL key / CSV column of the text (default: text)");
  cmd->add_option("--id-field", o.id_field, "JSONL key / CSV column of the id (default: id; absent: line number)");
  cmd->add_flag("--faiss", o.faiss, "Also build index.faiss (flat: inner product if normalised, else L2)");
  cmd->add_option("--checkpoint-every", o.checkpoint_every, "Commit the output every N documents (default 10000)");
  cmd->add_option("--checkpoint-seconds", o.checkpoint_seconds, "... and at least every S seconds (default 10)");
  cmd->add_flag("--skip-empty", o.skip_empty, "Skip empty documents (counted) instead of failing on them");
  cmd->add_flag("!--no-progress", o.progress, "No progress on stderr");
  return cmd;
}

int run_embed(const EmbedOptions& o) {
  // Everything the job says goes to stderr, next to its progress.
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  Job job(o);
  if (Status s = open_job(job); !s.ok()) return fail(s.message());
  std::fprintf(stderr, "prism embed: %s (space %s, %lld dims, %s) -> %s%s\n", o.model.c_str(),
               job.frontend->space_id().c_str(), static_cast<long long>(job.dims), o.precision.c_str(),
               o.output.c_str(),
               job.start_docs > 0 ? (", resuming after " + format_count(job.start_docs) + " documents").c_str() : "");
  ProgressReporter progress("prism embed:", job.reader->size_bytes(), job.start_docs, job.start.offset, o.progress);

  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const Clock::time_point t0 = Clock::now();
  bool interrupted = false;
  const Status status = run_pipeline(job, progress, interrupted);
  job.deployment.reset();  // stopped here, so its lines come before the job's last ones
  const std::string done = format_count(job.output->committed());
  if (!status.ok()) {
    fail(status.message());
    std::fprintf(stderr, "prism embed: %s documents are committed in %s; fix the cause and rerun with --resume\n",
                 done.c_str(), o.output.c_str());
    return 1;
  }
  if (interrupted) {
    std::fprintf(stderr, "prism embed: interrupted; %s documents are committed; rerun with --resume to continue\n",
                 done.c_str());
    return 130;
  }
  if (o.faiss) {
    Result<int64_t> rows = pipelines::search::VectorIndex::build(o.output);
    if (!rows.has_value()) return fail("building index.faiss: " + rows.status().message());
  }
  print_summary(job, std::chrono::duration<double>(Clock::now() - t0).count());
  return 0;
}

}  // namespace prism::app
