// engines/generate/generate_metrics.cpp: registration of the generate loop's series.
#include "engines/generate/generate_metrics.h"

namespace prism::engines::generate {

GenerateMetrics::GenerateMetrics(serving::MetricsRegistry& m, const serving::Labels& l)
  : ttft(m.histogram("prism_generate_time_to_first_token_seconds",
                       "Submit to the first generated token of a request.", serving::latency_buckets_seconds(), l)),
      itl(m.histogram("prism_generate_inter_token_latency_seconds",
                      "Time between consecutive tokens of a sequence (a step's tokens share its time).",
                      serving::latency_buckets_seconds(), l)),
      e2e(m.histogram("prism_generate_e2e_request_seconds", "Submit to the last token of a request.",
                      serving::latency_buckets_seconds(), l)),
      queue(m.histogram("prism_generate_queue_seconds", "Submit to the first step that computes the request.",
                        serving::latency_buckets_seconds(), l)),
      step_tokens(m.histogram("prism_generate_step_tokens", "Tokens computed per engine step.",
                              serving::batch_token_buckets(), l)),
      running(m.gauge("prism_generate_sequences_running", "Sequences holding KV blocks and being computed.", l)),
      waiting(m.gauge("prism_generate_sequences_waiting",
                      "Sequences taken by the engine waiting for KV blocks or budget (preempted ones included).",
                      l)),
      kv_usage(m.gauge("prism_kv_cache_usage_ratio", "KV blocks referenced by sequences / all KV blocks.", l)),
      prefix_hit(m.counter("prism_prefix_cache_hit_tokens_total", "Prompt tokens whose K/V came from the prefix cache.",
                           l)),
      prefix_queried(m.counter("prism_prefix_cache_queried_tokens_total",
                               "Prompt tokens looked up in the prefix cache (hit ratio: hit / queried).", l)),
      preemptions(m.counter("prism_generate_preemptions_total",
                            "Sequences preempted (blocks freed, recomputed later) because the KV cache was full.", l)),
      prompt_tokens(m.counter("prism_generate_prompt_tokens_total", "Prompt tokens of admitted requests.", l)),
      generation_tokens(m.counter("prism_generate_generation_tokens_total", "Tokens generated (every choice).", l)),
      draft_tokens(m.counter("prism_spec_draft_tokens_total", "Draft tokens verified by speculative decoding.", l)),
      accepted_tokens(m.counter("prism_spec_accepted_tokens_total",
                                "Draft tokens accepted (acceptance rate: accepted / draft).", l)) {}

}  // namespace prism::engines::generate
