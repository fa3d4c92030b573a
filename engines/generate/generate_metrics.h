// engines/generate/generate_metrics.h: the prism_generate_* series of the continuous-batching
// loop (latencies, step sizes, sequences, KV usage, prefix cache, speculation). The series of
// an input stage (media, speech) live with the stage. Registration only: it must not hold
// engine state or decide anything.
#pragma once

#include "serving/metrics.h"

namespace prism::engines::generate {

// Shared by the replicas of a deployment (same labels, same series).
struct GenerateMetrics {
  GenerateMetrics(serving::MetricsRegistry& m, const serving::Labels& l);

  serving::Histogram& ttft;
  serving::Histogram& itl;
  serving::Histogram& e2e;
  serving::Histogram& queue;
  serving::Histogram& step_tokens;
  serving::Gauge& running;
  serving::Gauge& waiting;
  serving::Gauge& kv_usage;
  serving::Counter& prefix_hit;
  serving::Counter& prefix_queried;
  serving::Counter& preemptions;
  serving::Counter& prompt_tokens;
  serving::Counter& generation_tokens;
  serving::Counter& draft_tokens;
  serving::Counter& accepted_tokens;
};

}  // namespace prism::engines::generate
