// pipelines/transcribe/transcription.h: one long-form transcription, orchestrated over a
// deployment's generate engine. Audio → VAD spans → chunks of at most asr_chunk_seconds
// (chunk_plan.h) → one decode request per chunk, submitted together (up to the engine's
// capacity, then one as each completes) so the engine decodes the chunks of every request in
// the same continuous batches (no request waits behind a longer one) → each completed chunk
// judged (quality.h): silence dropped, failures decoded again at the next temperature, only
// those (a chunk failing at every temperature keeps its best attempt: faster-whisper's
// highest avg_logprob within the compression-ratio threshold) → segments mapped back to the
// original time, clipped to their chunk and stitched in time order (blank ones left out).
// Segments are reported as soon as every earlier chunk is final, so a stream of deltas stays
// in order. Sequential mode (knob asr_parallel_chunks = false, benchmarks' baseline) submits
// chunk k + 1 when chunk k is final, conditioned on the text before it, as openai/whisper's
// transcribe() does.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "base/status.h"
#include "frontends/generate_frontend.h"
#include "pipelines/transcribe/transcript.h"
#include "pipelines/transcribe/voice_activity.h"
#include "serving/config.h"
#include "serving/metrics.h"
#include "serving/request.h"

namespace prism::pipelines::transcribe {

struct TranscribeSettings {
  double chunk_seconds = 30.0;   // knob asr_chunk_seconds: 1..30
  bool parallel_chunks = true;   // knob asr_parallel_chunks
  double max_audio_seconds = 3 * 3600;  // knob max_audio_seconds
  // Parallel mode: chunks of one transcription queued or running at once (0: all of them).
  // AsrServices sets the engine's capacity (batching.max_batch_size × replicas): a long file
  // then fills the batch, but its remaining chunks wait here, not in the deployment's FIFO
  // queue, so another request's chunks take the next free sequence slot instead of waiting
  // behind every chunk of the long one. Not a knob.
  int max_chunks_in_flight = 0;
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
  std::shared_ptr<const frontends::GenerateFrontend> frontend;
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
  // Cancels every chunk request still running; on_done gets cancelled (unless it already ran).
  // Any thread, any number of times.
  virtual void cancel() = 0;

  virtual ~Transcription() = default;

 protected:
  Transcription() = default;
};

}  // namespace prism::pipelines::transcribe
