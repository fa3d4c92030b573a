// frontends/logits_processor.h: a per-choice hook on the raw logits, for decoders
// whose output has rules of its own (Whisper: suppressed tokens, timestamp pairing, a
// language picked among language tokens). It runs on each row before the sampler (so the
// reported logprobs are those of the processed row, as Whisper computes avg_logprob) and may
// set logits to -inf; a row it leaves with one finite entry forces that token. The engine
// makes one per choice from GenerateInput::logits_processor (forks get their own, made when
// choice 0's prefill ends) and calls it from its step only: never two calls on one processor
// at once, but the processors of different choices may run at the same time (the sampling
// pass is parallel over sequences), so processors must share nothing mutable. Requests with a
// processor are never speculated; requests whose processor probes a row bypass prefix-cache
// lookups (a hit would skip the row).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace prism::frontends {

class LogitsProcessor {
 public:
  virtual ~LogitsProcessor() = default;
  // logits: the next-token row [vocab]; generated: the tokens this choice sampled before it
  // (stop tokens included, the prompt not).
  virtual void process(std::span<float> logits, std::span<const int32_t> generated) = 0;

  // A prompt position whose next-token logits the processor wants to see (Whisper's
  // no-speech probability is read at the start-of-transcript token), or -1. The engine adds
  // that row to the step that prefills it and calls probe() with it (the raw row) before any
  // process(); again, with the same values, if the prompt is recomputed after a preemption.
  // Only choice 0's processor is asked. A position past the prompt fails the request.
  virtual int64_t probe_position() const { return -1; }
  virtual void probe(std::span<const float> logits) { (void)logits; }
};

// Makes choice `choice`'s processor. The factory (and what it captures) outlives the request.
using LogitsProcessorFactory = std::function<std::unique_ptr<LogitsProcessor>(int choice)>;

}  // namespace prism::frontends
