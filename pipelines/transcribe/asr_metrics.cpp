// pipelines/transcribe/asr_metrics.cpp: the prism_asr_* series of a transcribe deployment,
// looked up once (the registry's get-or-create takes a lock; observe() does not).
#include <array>

#include "pipelines/transcribe/transcription.h"

namespace prism::pipelines::transcribe {
namespace {

// Processing time over audio time: well below 1 is the aim for long-form on a loaded server.
constexpr std::array<double, 12> kRealTimeFactorBuckets = {0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5};
constexpr std::array<double, 10> kRatioBuckets = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};

}  // namespace

AsrMetrics::AsrMetrics(serving::MetricsRegistry& r, const serving::Labels& labels)
    : audio_seconds(r.counter("prism_asr_audio_seconds_total", "Seconds of audio transcribed (long-form).", labels)),
      speech_seconds(r.counter("prism_asr_speech_seconds_total",
                               "Seconds of audio inside voice-activity spans (long-form).", labels)),
      real_time_factor(r.histogram("prism_asr_real_time_factor",
                                   "Processing seconds per second of audio, per long-form transcription.",
                                   kRealTimeFactorBuckets, labels)),
      chunk_seconds(r.histogram("prism_asr_chunk_latency_seconds",
                                "First submit to final result of a long-form chunk (re-runs included).",
                                serving::latency_buckets_seconds(), labels)),
      speech_ratio(r.histogram("prism_asr_speech_ratio", "Speech seconds over audio seconds, per transcription.",
                               kRatioBuckets, labels)),
      chunks(r.counter("prism_asr_chunks_total", "Long-form chunks decoded to a final result.", labels)),
      rerun_chunks(r.counter("prism_asr_rerun_chunks_total",
                             "Chunks decoded again at a higher temperature after failing the quality checks.",
                             labels)),
      live_streams(r.gauge("prism_asr_live_streams", "Live transcription streams open.", labels)),
      live_latency(r.histogram("prism_asr_live_partial_latency_seconds",
                               "From the end of a live audio chunk to its partial result.",
                               serving::latency_buckets_seconds(), labels)) {}

}  // namespace prism::pipelines::transcribe
