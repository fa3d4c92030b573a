// app/embed_queue.cpp: `prism embed-queue push|work|collect|status` over a RedisWorkQueue.
// The queue moves bytes; this file owns what they mean: a document's payload, a vector's
// result, and the job's attributes ("input": how push read the file; "embedding": the space
// of its vectors).
#include "app/embed_queue.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "app/embed_deployment.h"
#include "app/embed_input.h"
#include "app/embed_output.h"
#include "app/progress.h"
#include "frontends/embed_frontend.h"
#include "pipelines/search/vector_index.h"
#include "runtime/ops.h"
#include "runtime/threads.h"
#include "serving/redis_work_queue.h"

namespace prism::app {
namespace {

using Clock = std::chrono::steady_clock;
using frontends::EmbedFrontend;
using serving::ClaimedItem;
using serving::RedisWorkQueue;
using serving::WorkItem;
using serving::WorkProgress;

constexpr int64_t kPushBatch = 1000;         // documents per add (one MULTI/EXEC)
constexpr int64_t kCollectChunk = 4096;      // results read per round trip
constexpr int64_t kCollectCheckpoint = 65536;  // documents between checkpoints of the output
constexpr const char* kInputAttribute = "input";
constexpr const char* kEmbeddingAttribute = "embedding";

std::atomic<bool> g_interrupted{false};
extern "C" void on_worker_interrupt(int) { g_interrupted.store(true); }

int fail(const char* sub, const std::string& message) {
  std::fprintf(stderr, "prism embed-queue %s: %s\n", sub, message.c_str());
  return 1;
}

// ---- What the items and results of a job hold ----
// NOTE: both start with the document id as a 4-byte little-endian length and its bytes; the
// payload then holds the text, the result the vector (f32 little-endian). Binary, so any text
// (invalid UTF-8 included: the tokenizer repairs it) travels unchanged.

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string with_id(const std::string& id, size_t extra) {
  std::string out;
  out.reserve(4 + id.size() + extra);
  put_u32(out, static_cast<uint32_t>(id.size()));
  out += id;
  return out;
}

// Splits bytes into the id and what follows; false when malformed.
bool split_id(std::string_view bytes, std::string& id, std::string_view& rest) {
  if (bytes.size() < 4) return false;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  if (bytes.size() - 4 < n) return false;
  id.assign(bytes.substr(4, n));
  rest = bytes.substr(4 + n);
  return true;
}

std::string encode_document(const std::string& id, const std::string& text) {
  std::string out = with_id(id, text.size());
  out += text;
  return out;
}

std::string encode_vector(const std::string& id, std::span<const float> v) {
  static_assert(std::endian::native == std::endian::little, "results are little-endian f32");
  std::string out = with_id(id, v.size_bytes());
  out.append(reinterpret_cast<const char*>(v.data()), v.size_bytes());
  return out;
}

// ---- The job's attributes ----

std::string input_attribute(const EmbedQueueOptions& o, InputFormat format) {
  static constexpr const char* kFormats[] = {"jsonl", "txt", "csv"};
  return nlohmann::json{{"format", kFormats[static_cast<int>(format)]},
                        {"text_field", o.text_field},
                        {"id_field", o.id_field},
                        {"skip_empty", o.skip_empty}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string embedding_attribute(const EmbeddingMetadata& m) {
  return nlohmann::json{{"model", m.model},     {"space_id", m.space_id}, {"dims", m.dims},
                        {"normalized", m.normalized}, {"pooling", m.pooling}, {"precision", m.precision}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<EmbeddingMetadata> parse_embedding_attribute(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  EmbeddingMetadata m;
  try {
    m.model = j.at("model").get<std::string>();
    m.space_id = j.at("space_id").get<std::string>();
    m.dims = j.at("dims").get<int64_t>();
    m.normalized = j.at("normalized").get<bool>();
    m.pooling = j.at("pooling").get<std::string>();
    m.precision = j.at("precision").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return data_loss("the job's embedding attribute is not one this version understands: " + text);
  }
  if (m.dims <= 0) return data_loss("the job's embedding attribute has dims " + std::to_string(m.dims));
  return m;
}

// Records `mine` as the job's embedding space, or checks it against the one recorded first.
Status bind_embedding(RedisWorkQueue& q, const std::string& job, const EmbeddingMetadata& mine) {
  PRISM_ASSIGN_OR_RETURN(std::string held, q.set_attribute_once(kEmbeddingAttribute, embedding_attribute(mine)));
  PRISM_ASSIGN_OR_RETURN(EmbeddingMetadata first, parse_embedding_attribute(held));
  const std::string was = " (model " + first.model + ", space " + first.space_id + ", " +
                          std::to_string(first.dims) + " dims, " + first.precision + ")";
  if (first.space_id != mine.space_id)
    return failed_precondition("job " + job + " is made in another embedding space" + was + "; this worker's " +
                               mine.model + " is space " + mine.space_id + ": refused");
  if (first.dims != mine.dims)
    return failed_precondition("job " + job + " has " + std::to_string(first.dims) + "-dim vectors" + was +
                               "; this worker would write " + std::to_string(mine.dims) + ": refused");
  if (first.precision != mine.precision)
    return failed_precondition("job " + job + " is embedded at " + first.precision + was + "; this worker runs " +
                               mine.precision + ": refused (pass --precision " + first.precision + ")");
  return {};
}

Result<std::unique_ptr<RedisWorkQueue>> open_queue(const EmbedQueueOptions& o) {
  PRISM_ASSIGN_OR_RETURN(serving::RedisEndpoint endpoint, serving::parse_redis_endpoint(o.redis));
  PRISM_RETURN_IF_ERROR(serving::check_queue_name(o.job));
  return RedisWorkQueue::open(endpoint, o.job);
}

// The rule of `prism embed`: no character but ASCII whitespace.
bool is_empty_text(const std::string& text) {
  for (unsigned char c : text)
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') return false;
  return true;
}

// ---- push ----

int run_push(const EmbedQueueOptions& o) {
  const char* sub = "push";
  Result<InputFormat> format = input_format_of(o.input);
  if (!format.has_value()) return fail(sub, format.status().message());
  auto q = open_queue(o);
  if (!q.has_value()) return fail(sub, q.status().message());
  RedisWorkQueue& queue = *q.value();

  const std::string input_attr = input_attribute(o, format.value());
  Result<std::string> held = queue.set_attribute_once(kInputAttribute, input_attr);
  if (!held.has_value()) return fail(sub, held.status().message());
  if (held.value() != input_attr)
    return fail(sub, "job " + o.job + " was pushed with other input options " + held.value() + ", not " + input_attr +
                         ": push again with the same options, or use a new --job");
  Result<WorkProgress> start = queue.progress();
  if (!start.has_value()) return fail(sub, start.status().message());
  const int64_t already = start.value().total;

  InputOptions io;
  io.text_field = o.text_field;
  io.id_field = o.id_field;
  auto reader = DocumentReader::open(o.input, format.value(), io);
  if (!reader.has_value()) return fail(sub, reader.status().message());
  DocumentReader& r = *reader.value();
  ProgressReporter progress("prism embed-queue push:", r.size_bytes(), already, 0, o.progress);

  // NOTE: a re-run reads past the documents the job holds (the same rule numbers them) and
  // adds the rest; add() checks the count, so two pushes at once cannot both add them.
  int64_t seen = 0, skipped_empty = 0, total = already;
  std::vector<WorkItem> batch;
  InputDocument doc;
  auto flush = [&]() -> Status {
    if (batch.empty()) return {};
    if (start.value().closed)
      return failed_precondition("job " + o.job + " was pushed complete with " + format_count(already) +
                                 " documents, but the input holds more: use a new --job for a new input");
    PRISM_RETURN_IF_ERROR(queue.add(batch, total));
    total += static_cast<int64_t>(batch.size());
    batch.clear();
    progress.update(total, r.position().offset);
    return {};
  };
  for (;;) {
    Result<bool> got = r.next(doc);
    if (!got.has_value()) return fail(sub, got.status().message());
    if (!got.value()) break;
    if (is_empty_text(doc.text)) {
      if (!o.skip_empty)
        return fail(sub, r.path() + ":" + std::to_string(doc.line) + ": document '" + doc.id +
                             "' is empty (pass --skip-empty to skip empty documents)");
      ++skipped_empty;
      continue;
    }
    if (seen++ < already) continue;
    batch.push_back({std::to_string(seen - 1), encode_document(doc.id, doc.text)});
    if (static_cast<int64_t>(batch.size()) == kPushBatch) {
      if (Status s = flush(); !s.ok()) return fail(sub, s.message());
    }
  }
  if (Status s = flush(); !s.ok()) return fail(sub, s.message());
  progress.finish(total, r.position().offset);
  if (seen < already)
    return fail(sub, "the input holds " + format_count(seen) + " documents but job " + o.job + " already holds " +
                         format_count(already) + ": it is not the input the job was pushed from");
  if (total == 0) return fail(sub, "the input " + o.input + " holds no documents");
  if (Status s = queue.close(); !s.ok()) return fail(sub, s.message());
  std::fprintf(stderr, "prism embed-queue push: job %s holds %s documents (%s added by this run%s)\n", o.job.c_str(),
               format_count(total).c_str(), format_count(total - already).c_str(),
               skipped_empty > 0 ? (", " + format_count(skipped_empty) + " empty skipped").c_str() : "");
  return 0;
}

// ---- work ----

std::string default_consumer() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) std::strcpy(host, "worker");
  return std::string(host) + "-" + std::to_string(getpid());
}

struct Worker {
  const EmbedQueueOptions& o;
  RedisWorkQueue& queue;
  const EmbedFrontend& frontend;
  EmbedDeployment& deployment;  // the in-process embed deployment: one request per claimed batch
  int64_t dims;
  std::string consumer;
  int64_t embedded = 0, stored = 0, reclaimed = 0;

  // Embeds one claimed batch; the results in item order.
  Result<std::vector<std::string>> embed(const std::vector<ClaimedItem>& items) {
    const size_t n = items.size();
    std::vector<std::string> ids(n);
    std::vector<std::vector<int32_t>> sequences(n);
    std::vector<Status> errors(n);
    // Tokenization on this thread's OpenMP team, between model calls: the deployment's team
    // (on its replica thread) is idle meanwhile, as this thread waits for each batch's vectors.
    parallel_for(static_cast<int64_t>(n), 8, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        std::string_view text;
        if (!split_id(items[i].payload, ids[i], text)) {
          errors[i] = data_loss("item " + items[i].key + " of job " + o.job + " holds no document");
          continue;
        }
        Result<std::vector<int32_t>> t = frontend.tokenize(text, o.truncate);
        if (t.has_value()) sequences[i] = std::move(t).value();
        else errors[i] = t.status();
      }
    });
    for (size_t i = 0; i < n; ++i) {
      if (errors[i].ok()) continue;
      if (errors[i].code() == StatusCode::data_loss) return errors[i];
      return invalid_argument("document " + items[i].key + " ('" + ids[i] + "') " + errors[i].message());
    }
    PRISM_ASSIGN_OR_RETURN(const std::vector<float> vectors, deployment.embed(std::move(sequences), o.dimensions));
    std::vector<std::string> results(n);
    for (size_t i = 0; i < n; ++i)
      results[i] = encode_vector(ids[i], std::span<const float>(vectors).subspan(i * dims, dims));
    return results;
  }

  // Claims, embeds and completes until the job is finished (true) or SIGINT/SIGTERM (false).
  Result<bool> run() {
    serving::ClaimOptions co;
    co.max_items = o.batch;
    co.min_idle_ms = o.min_idle_ms;
    // Idle waits end at least twice per min-idle period, to take over a dead worker's batch.
    co.wait_ms = std::clamp<int64_t>(o.min_idle_ms / 2, 50, 2000);
    PRISM_ASSIGN_OR_RETURN(WorkProgress p, queue.progress());
    ProgressReporter progress("prism embed-queue work:", std::max<int64_t>(p.total, 1), p.done, p.done, o.progress);
    Clock::time_point last_progress = Clock::now();
    bool said_waiting = false;
    while (!g_interrupted.load()) {
      PRISM_ASSIGN_OR_RETURN(std::vector<ClaimedItem> items, queue.claim(consumer, co));
      if (items.empty()) {
        PRISM_ASSIGN_OR_RETURN(p, queue.progress());
        if (p.finished()) {
          progress.finish(p.done, p.done);
          return true;
        }
        if (p.total == 0 && !said_waiting) {
          std::fprintf(stderr, "prism embed-queue work: job %s holds no documents yet: waiting for a push\n",
                       o.job.c_str());
          said_waiting = true;
        }
        continue;
      }
      PRISM_ASSIGN_OR_RETURN(std::vector<std::string> results, embed(items));
      PRISM_ASSIGN_OR_RETURN(int64_t completed, queue.complete(consumer, items, results));
      embedded += static_cast<int64_t>(items.size());
      stored += completed;
      reclaimed += std::count_if(items.begin(), items.end(), [](const ClaimedItem& c) { return c.reclaimed; });
      if (Clock::now() - last_progress > std::chrono::seconds(1)) {
        PRISM_ASSIGN_OR_RETURN(p, queue.progress());
        progress.update(p.done, p.done);
        last_progress = Clock::now();
      }
    }
    return false;
  }
};

int run_work(const EmbedQueueOptions& o) {
  const char* sub = "work";
  if (o.batch < 1) return fail(sub, "--batch must be at least 1");
  if (o.batch_tokens < 1) return fail(sub, "--batch-tokens must be at least 1");
  if (o.min_idle_ms < 1) return fail(sub, "--min-idle-ms must be at least 1");
  if (o.dimensions < 0) return fail(sub, "--dimensions must be positive");
  Result<ops::Precision> precision = ops::parse_precision(o.precision);
  if (!precision.has_value()) return fail(sub, precision.status().message());
  auto q = open_queue(o);
  if (!q.has_value()) return fail(sub, q.status().message());

  auto deployment = EmbedDeployment::start({o.model, o.precision, o.batch_tokens});
  if (!deployment.has_value()) return fail(sub, deployment.status().message());
  const EmbedFrontend& fe = *deployment.value()->frontend();
  if (Status s = fe.check_dimensions(o.dimensions); !s.ok()) return fail(sub, "--dimensions: " + s.message());
  const int64_t dims = o.dimensions > 0 ? o.dimensions : fe.dims();
  const EmbeddingMetadata meta{o.model,
                               fe.space_id(),
                               dims,
                               fe.normalize(),
                               std::string(configs::pooling_name(fe.pooling())),
                               std::string(ops::precision_name(precision.value()))};
  if (Status s = bind_embedding(*q.value(), o.job, meta); !s.ok()) return fail(sub, s.message());

  Worker w{o, *q.value(), fe, *deployment.value(), dims, o.consumer.empty() ? default_consumer() : o.consumer};
  std::fprintf(stderr, "prism embed-queue work: consumer %s on job %s at %s: %s (space %s, %lld dims, %s)\n",
               w.consumer.c_str(), o.job.c_str(), o.redis.c_str(), o.model.c_str(), fe.space_id().c_str(),
               static_cast<long long>(dims), o.precision.c_str());
  struct sigaction sa {};
  sa.sa_handler = on_worker_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  const Clock::time_point t0 = Clock::now();
  Result<bool> finished = w.run();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  deployment.value().reset();  // stopped here, so its lines come before the worker's last ones
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.1f", seconds);
  const std::string summary = "consumer " + w.consumer + " embedded " + format_count(w.embedded) + " documents (" +
                              format_count(w.stored) + " stored, " + format_count(w.embedded - w.stored) +
                              " done by another first, " + format_count(w.reclaimed) + " taken over) in " + secs +
                              " s";
  if (!finished.has_value()) {
    fail(sub, finished.status().message());
    std::fprintf(stderr, "prism embed-queue work: %s; its unfinished batch stays pending for another worker\n",
                 summary.c_str());
    return 1;
  }
  if (!finished.value()) {
    std::fprintf(stderr, "prism embed-queue work: interrupted: %s\n", summary.c_str());
    return 130;
  }
  std::fprintf(stderr, "prism embed-queue work: job %s is finished: %s\n", o.job.c_str(), summary.c_str());
  return 0;
}

// ---- collect ----

std::string collect_token(const std::string& job, int64_t docs) {
  return nlohmann::json{{"redis_job", job}, {"docs", docs}}.dump();
}

int run_collect(const EmbedQueueOptions& o) {
  const char* sub = "collect";
  auto q = open_queue(o);
  if (!q.has_value()) return fail(sub, q.status().message());
  RedisWorkQueue& queue = *q.value();
  Result<WorkProgress> p = queue.progress();
  if (!p.has_value()) return fail(sub, p.status().message());
  const int64_t total = p.value().total;
  if (!p.value().closed)
    return fail(sub, "job " + o.job + " is still being pushed (" + format_count(total) + " documents so far)");
  if (p.value().done < total)
    return fail(sub, "job " + o.job + " is not finished: " + format_count(total - p.value().done) + " of " +
                         format_count(total) + " documents have no vector yet (" + format_count(p.value().pending) +
                         " pending): run `prism embed-queue work` until it finishes");
  Result<std::optional<std::string>> attr = queue.attribute(kEmbeddingAttribute);
  if (!attr.has_value()) return fail(sub, attr.status().message());
  if (!attr.value()) return fail(sub, "job " + o.job + " has no embedding space recorded: no worker has run it");
  Result<EmbeddingMetadata> meta = parse_embedding_attribute(*attr.value());
  if (!meta.has_value()) return fail(sub, meta.status().message());

  auto output = EmbeddingOutput::open(o.output, meta.value(), o.resume);
  if (!output.has_value()) return fail(sub, output.status().message());
  EmbeddingOutput& out = *output.value();
  int64_t next = out.committed();
  if (next > 0 && out.resume_token() != collect_token(o.job, next))
    return fail(sub, o.output + " holds " + format_count(next) + " documents that are not the first ones of job " +
                         o.job + " (its checkpoint says " + out.resume_token() + ")");
  if (next > total)
    return fail(sub, o.output + " holds " + format_count(next) + " documents, job " + o.job + " only " +
                         format_count(total));

  const int64_t dims = meta.value().dims;
  const int64_t vector_bytes = dims * static_cast<int64_t>(sizeof(float));
  std::vector<std::string> keys, ids;
  std::vector<float> vectors;
  while (next < total) {
    const int64_t end = std::min(total, next + kCollectChunk);
    keys.clear();
    for (int64_t i = next; i < end; ++i) keys.push_back(std::to_string(i));
    Result<std::vector<std::optional<std::string>>> results = queue.results(keys);
    if (!results.has_value()) return fail(sub, results.status().message());
    ids.assign(keys.size(), std::string());
    vectors.resize(keys.size() * dims);
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::optional<std::string>& r = results.value()[i];
      std::string_view v;
      if (!r) return fail(sub, "document " + keys[i] + " of job " + o.job + " has no vector: refused");
      if (!split_id(*r, ids[i], v) || static_cast<int64_t>(v.size()) != vector_bytes)
        return fail(sub, "the result of document " + keys[i] + " of job " + o.job + " is not a " +
                             std::to_string(dims) + "-dim vector");
      std::memcpy(vectors.data() + i * dims, v.data(), v.size());
    }
    if (Status s = out.append(ids, vectors); !s.ok()) return fail(sub, s.message());
    next = end;
    if (next % kCollectCheckpoint == 0 || next == total) {
      if (Status s = out.checkpoint(collect_token(o.job, next)); !s.ok()) return fail(sub, s.message());
    }
  }
  if (out.committed() != total || out.resume_token() != collect_token(o.job, total)) {
    if (Status s = out.checkpoint(collect_token(o.job, total)); !s.ok()) return fail(sub, s.message());
  }
  if (o.faiss) {
    Result<int64_t> rows = pipelines::search::VectorIndex::build(o.output);
    if (!rows.has_value()) return fail(sub, "building index.faiss: " + rows.status().message());
  }
  std::fprintf(stderr, "prism embed-queue collect: %s vectors of job %s in %s (space %s, %lld dims, %s)%s\n",
               format_count(total).c_str(), o.job.c_str(), o.output.c_str(), meta.value().space_id.c_str(),
               static_cast<long long>(dims), meta.value().precision.c_str(), o.faiss ? ", index.faiss written" : "");
  return 0;
}

// ---- status ----

int run_status(const EmbedQueueOptions& o) {
  const char* sub = "status";
  auto q = open_queue(o);
  if (!q.has_value()) return fail(sub, q.status().message());
  Result<WorkProgress> p = q.value()->progress();
  if (!p.has_value()) return fail(sub, p.status().message());
  Result<std::optional<std::string>> attr = q.value()->attribute(kEmbeddingAttribute);
  if (!attr.has_value()) return fail(sub, attr.status().message());
  nlohmann::json j = {{"job", o.job},
                      {"total", p.value().total},
                      {"done", p.value().done},
                      {"pending", p.value().pending},
                      {"closed", p.value().closed},
                      {"finished", p.value().finished()},
                      {"pending_by_consumer", p.value().pending_by_consumer},
                      {"embedding", nullptr}};
  if (attr.value()) j["embedding"] = nlohmann::json::parse(*attr.value(), nullptr, /*allow_exceptions=*/false);
  std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  return 0;
}

void add_queue_options(CLI::App* cmd, EmbedQueueOptions& o) {
  cmd->add_option("--redis", o.redis, "Redis server, HOST:PORT (default 127.0.0.1:6379)");
  cmd->add_option("--job", o.job, "Job name (letters, digits, '.', '_', '-'): its Redis keys are prism:queue:{NAME}:*")
      ->required();
}

}  // namespace

EmbedQueueCommand add_embed_queue_command(CLI::App& app, EmbedQueueOptions& o) {
  EmbedQueueCommand c;
  c.command =
      app.add_subcommand("embed-queue", "A bulk embedding job shared by workers on many machines (Redis Streams)");
  c.command->require_subcommand(1);

  c.push = c.command->add_subcommand("push", "Queue the documents of a file (re-run: continues after those queued)");
  add_queue_options(c.push, o);
  c.push->add_option("--input", o.input, "Documents: .jsonl/.ndjson, .txt (a line each) or .csv")->required();
  c.push->add_option("--text-field", o.text_field, "JSONL key / CSV column of the text (default: text)");
  c.push->add_option("--id-field", o.id_field, "JSONL key / CSV column of the id (default: id; absent: line number)");
  c.push->add_flag("--skip-empty", o.skip_empty, "Skip empty documents instead of failing on them");
  c.push->add_flag("!--no-progress", o.progress, "No progress on stderr");

  c.work = c.command->add_subcommand("work", "Embed the job's documents until it is finished (run any number)");
  add_queue_options(c.work, o);
  c.work->add_option("--model", o.model, "Hugging Face model directory of an embedding model")->required();
  c.work->add_option("--consumer", o.consumer, "This worker's name in the consumer group (default: HOSTNAME-PID)");
  c.work->add_option("--precision", o.precision, "f32, bf16 or int8 (every worker of a job must use the same)")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}));
  c.work->add_option("--batch", o.batch, "Documents claimed and embedded at a time (default 64)");
  c.work->add_option("--batch-tokens", o.batch_tokens, "Micro-batch token budget of the model (default 16384)");
  c.work->add_option("--min-idle-ms", o.min_idle_ms,
                     "Take over another worker's batch once pending this long (default 30000; keep it above the "
                     "time one batch takes)");
  c.work->add_option("--dimensions", o.dimensions, "Matryoshka: keep the first D dims and re-normalise");
  c.work->add_flag("--truncate", o.truncate, "Cut documents longer than the model's maximum instead of failing");
  c.work->add_flag("!--no-progress", o.progress, "No progress on stderr");

  c.collect = c.command->add_subcommand("collect", "Write a finished job's vectors, in document order, to a folder");
  add_queue_options(c.collect, o);
  c.collect->add_option("--output", o.output, "Output directory (as `prism embed` writes it)")->required();
  c.collect->add_flag("--resume", o.resume, "Continue a collect into --output that was interrupted");
  c.collect->add_flag("--faiss", o.faiss, "Also build index.faiss");

  c.status = c.command->add_subcommand("status", "Print the job's progress as JSON");
  add_queue_options(c.status, o);
  return c;
}

int run_embed_queue(const EmbedQueueCommand& c, const EmbedQueueOptions& o) {
  if (c.push->parsed()) return run_push(o);
  if (c.work->parsed()) return run_work(o);
  if (c.collect->parsed()) return run_collect(o);
  return run_status(o);
}

}  // namespace prism::app
