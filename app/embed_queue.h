// app/embed_queue.h: `prism embed-queue`, a bulk embedding job split across processes or
// machines through a work queue on Redis Streams (serving/redis_work_queue.h):
//   prism embed-queue push    --redis HOST:PORT --job NAME --input docs.jsonl|.txt|.csv
//   prism embed-queue work    --redis HOST:PORT --job NAME --model DIR   (any number, anywhere)
//   prism embed-queue collect --redis HOST:PORT --job NAME --output DIR
//   prism embed-queue status  --redis HOST:PORT --job NAME               (JSON on stdout)
// Document i of the input (0-based, empty ones skipped with --skip-empty) is item "i" of the
// queue; its payload is its id and text, its result its id and vector. Workers claim batches,
// embed them and complete them (result stored + acknowledged atomically); a worker that dies
// leaves its batch pending and the others take it over after --min-idle-ms. collect writes
// the embedding folder of `prism embed` (app/embed_output.h) in document order.
// NOTE: re-running push continues after the documents the job holds (it reads past them);
// the first worker records the job's embedding space (model space id, dims, precision) and a
// worker of another space is refused, so every vector of a job is comparable.
// Exit codes: 0 done; 1 an error (message on stderr); 130 a worker stopped by SIGINT/SIGTERM
// after completing its current batch.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace prism::app {

struct EmbedQueueOptions {
  std::string redis = "127.0.0.1:6379";  // HOST:PORT
  std::string job;                       // the queue's name: [A-Za-z0-9._-]
  // push
  std::string input;
  std::string text_field = "text";
  std::string id_field = "id";
  bool skip_empty = false;
  // work
  std::string model;
  std::string consumer;            // default: HOSTNAME-PID (a restarted worker is a new consumer)
  std::string precision = "f32";
  int64_t batch = 64;              // documents claimed (and embedded) at a time
  int64_t batch_tokens = 16384;    // micro-batch token budget of the model
  int64_t min_idle_ms = 30000;     // take over another worker's batch pending this long
  int64_t dimensions = 0;          // Matryoshka: 0 = the model's
  bool truncate = false;           // cut documents longer than the model's maximum instead of failing
  bool progress = true;
  // collect
  std::string output;
  bool resume = false;             // continue a collect that was interrupted
  bool faiss = false;              // build index.faiss at the end
};

struct EmbedQueueCommand {
  CLI::App* command = nullptr;  // `embed-queue`: parsed() when any of its subcommands ran
  CLI::App* push = nullptr;
  CLI::App* work = nullptr;
  CLI::App* collect = nullptr;
  CLI::App* status = nullptr;
};

// Declares `embed-queue` and its subcommands on `app`, bound to `options`.
EmbedQueueCommand add_embed_queue_command(CLI::App& app, EmbedQueueOptions& options);

// Runs the subcommand that was parsed; returns the exit code.
int run_embed_queue(const EmbedQueueCommand& command, const EmbedQueueOptions& options);

}  // namespace prism::app
