// app/transcribe.h: `prism transcribe`, one audio file transcribed in-process:
//   prism transcribe FILE [--model DIR] [--format json|text|srt|vtt|verbose_json]
//     [--language xx] [--task transcribe|translate] [--prompt TEXT] [--temperature T]
//     [--output F] [--vad energy|silero --vad-model PATH] [--sequential] [--no-fallback]
//     [--no-progress]
// The same path as the server's /v1/audio/transcriptions: a DeploymentSet holding one
// "transcribe" deployment of DIR (default: the demo set's demo-asr), its AsrServices, the file
// decoded (media::decode_audio), a Transcription over the deployment's engine. The transcript
// goes to stdout (or --output) in the format asked (api/routes/transcript_format.h; default
// text); progress (chunks done of total, audio seconds per second) and messages to stderr.
// Exit codes: 0 done; 1 bad file, model, option or a failed transcription (one line says why).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "serving/config.h"

namespace CLI {
class App;
}

namespace prism::app {

struct TranscribeCommandOptions {
  std::string file;
  std::string model;             // Hugging Face Whisper directory; empty: the demo set's demo-asr
  std::string format = "text";   // json, text, srt, vtt, verbose_json
  std::string language;          // empty: detected
  std::string task = "transcribe";  // or translate
  std::string prompt;
  double temperature = 0.0;      // 0..1
  std::string output;            // empty: stdout
  std::string vad;               // empty: the deployment's (knob vad); energy | silero
  std::string vad_model;         // silero_vad.onnx
  bool sequential = false;       // knob asr_parallel_chunks = false: chunk k + 1 after chunk k
  bool temperature_fallback = true;  // --no-fallback: one decode per chunk
  bool progress = true;
  std::string demo_dir;          // where the demo set lives (tests); empty: default_demo_dir()
};

// Declares `transcribe` and its flags on `app`, bound to `options`. Returns the subcommand.
CLI::App* add_transcribe_command(CLI::App& app, TranscribeCommandOptions& options);

// Runs it; returns the exit code.
int run_transcribe(const TranscribeCommandOptions& options);

// The deployment the command serves: --model DIR (named after its last component), or the
// demo set's demo-asr (written if missing) as its prism.toml declares it; with the VAD and
// sequential flags as knobs and no request deadline. invalid_argument / not_found saying why.
Result<serving::DeploymentConfig> transcribe_deployment(const TranscribeCommandOptions& options);

// The progress line (pure). bar_width > 0: "[####......]  3/10 chunks  33.0 of 110.0 s  12.5 s/s
// ETA 6s"; 0: "3/10 chunks (30.0%), 33.0 of 110.0 s of audio, 12.5 audio s/s, ETA 6s". Audio
// done is counted as the finished chunks' share of the audio; rate and ETA read "-" until
// a chunk is done.
struct TranscribeProgress {
  int done_chunks = 0, total_chunks = 0;
  double audio_seconds = 0;
  double elapsed_s = 0;
};
std::string format_transcribe_progress(const TranscribeProgress& p, int bar_width);

}  // namespace prism::app
