// engines/transcribe/transcription.h: one long-form transcription, orchestrated over a
// deployment's generate engine. Audio → VAD spans → chunks of at most asr_chunk_seconds
// (chunk_plan.h) → one decode request per chunk, all submitted at once so the engine decodes
// every chunk of every request in the same continuous batches (no request waits behind a
// longer one) → each completed chunk judged (quality.h): silence dropped, failures decoded
// again at the next temperature, only those → segments mapped back to the original time and
// stitched in time order. Segments are reported as soon as every earlier chunk is final, so
// a stream of deltas stays in order. Sequential mode (knob asr_parallel_chunks = false,
// benchmarks' baseline) submits chunk k + 1 when chunk k is final, conditioned on its text,
// as openai/whisper's transcribe() does.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "engines/generate/generate_frontend.h"
#include "engines/transcribe/transcript.h"
#include "engines/transcribe/voice_activity.h"
#include "serving/config.h"
#include "serving/metrics.h"
#include "serving/request.h"

namespace prism::engines::transcribe {

struct TranscribeSettings {
  double chunk_seconds = 30.0;   // knob asr_chunk_seconds: 1..30
  bool parallel_chunks = true;   // knob asr_parallel_chunks
  double max_audio_seconds = 3 * 3600;  // knob max_audio_seconds
  VadSettings vad;
  static Result<TranscribeSettings> from_knobs(const serving::Knobs& knobs);
  static std::vector<std::string> knob_names();  // these and VadSettings'
};

// Prometheus series of a transcribe deployment (labels: deployment, modality "asr").
struct AsrMetrics {
  AsrMetrics(serving::MetricsRegistry& registry, const serving::Labels& labels);
  serving::Counter& audio_seconds;       // prism_asr_audio_seconds_total
  serving::Counter& speech_seconds;      // prism_asr_speech_seconds_total
  serving::Histogram& real_time_factor;  // prism_asr_real_time_factor: processing s / audio s, per request
  serving::Histogram& chunk_seconds;     // prism_asr_chunk_latency_seconds: submit → final, per chunk
  serving::Histogram& speech_ratio;      // prism_asr_speech_ratio: speech / audio, per request
  serving::Counter& chunks;              // prism_asr_chunks_total
  serving::Counter& rerun_chunks;        // prism_asr_rerun_chunks_total
  serving::Gauge& live_streams;          // prism_asr_live_streams
  serving::Histogram& live_latency;      // prism_asr_live_partial_latency_seconds: audio in → partial out
};

// What a caller gives: the deployment's frontend (its speech() processor), its VAD and how to
// queue one chunk request on it (api/app wrap Deployment::submit with deadlines and ids).
struct TranscriptionContext {
  std::shared_ptr<const generate::GenerateFrontend> frontend;
  std::shared_ptr<const VoiceActivity> vad;
  TranscribeSettings settings;
  std::function<Status(serving::RequestPtr)> submit;
  std::shared_ptr<AsrMetrics> metrics;  // optional
};

struct TranscriptionEvents {
  std::function<void(const Segment&)> on_segment;              // optional; time order, final
  std::function<void(int done_chunks, int total_chunks)> on_progress;  // optional
  std::function<void(Result<Transcript>)> on_done;             // exactly once
};

class Transcription : public std::enable_shared_from_this<Transcription> {
 public:
  // samples: 16 kHz mono (media::decode_audio). Events run on the engine's thread (or the
  // caller's, for errors found before any submit): keep them short.
  static std::shared_ptr<Transcription> start(TranscriptionContext context, std::vector<float> samples,
                                              TranscribeOptions options, TranscriptionEvents events);
  // Cancels every chunk request still running; on_done gets cancelled.
  void cancel();

  virtual ~Transcription() = default;

 protected:
  Transcription() = default;
};

}  // namespace prism::engines::transcribe
