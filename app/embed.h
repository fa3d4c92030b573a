// app/embed.h: `prism embed`, a bulk embedding job: documents from a file in, an embedding
// folder out (app/embed_output.h), resumable after a crash at any instant.
//   prism embed --model DIR --input docs.jsonl|.txt|.csv --output OUT [--resume] ...
// A reader thread reads and tokenizes the next batch while the in-process embed deployment
// (the server's execution path, app/embed_deployment.h) embeds the batches in flight and the
// calling thread writes their vectors in input order (two batches queued after the reader, three
// in flight, so memory stays flat whatever the input size); every --checkpoint-every documents
// or --checkpoint-seconds the output is committed with the input byte offset as its resume token.
// Empty documents (no non-whitespace character) are errors naming FILE:LINE, like OpenAI's
// API; --skip-empty skips them instead, counting them in the final report.
// Exit codes: 0 done; 1 bad input, model or output folder (what was committed stays, and
// --resume continues after a fixed line); 130 interrupted by SIGINT/SIGTERM after a final
// checkpoint. kill -9 loses nothing that --resume cannot redo.
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace prism::app {

struct EmbedOptions {
  std::string model;   // Hugging Face model directory
  std::string input;   // .jsonl / .ndjson, .txt or .csv (app/embed_input.h)
  std::string output;  // embedding folder
  std::string precision = "f32";
  bool resume = false;
  // Tokens per batch handed to the model (and its micro-batch budget). NOTE: measured on
  // MiniLM-L6 size, f32, 2 threads: 2048, 8192 and 16384 run at the same docs/s (within
  // noise), but peak RSS is 223, 358 and 560 MiB: bigger batches only cost memory.
  int64_t batch_tokens = 2048;
  int64_t dimensions = 0;  // Matryoshka: 0 = the model's
  bool truncate = false;   // cut documents longer than the model's maximum instead of failing
  std::string text_field = "text";
  std::string id_field = "id";
  bool faiss = false;                // build index.faiss at the end
  int64_t checkpoint_every = 10000;  // documents
  double checkpoint_seconds = 10;
  bool progress = true;
  bool skip_empty = false;
};

// Declares `embed` and its flags on `app`, bound to `options`. Returns the subcommand.
CLI::App* add_embed_command(CLI::App& app, EmbedOptions& options);

// Runs the job; returns the exit code (messages on stderr).
int run_embed(const EmbedOptions& options);

}  // namespace prism::app
