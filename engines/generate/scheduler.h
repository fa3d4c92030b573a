// engines/generate/scheduler.h: which sequences compute how many tokens in the next step
// (continuous batching). A pure function of plain views: no clock, no tensors, no mutation;
// the engine applies the plan (allocates blocks, preempts, builds the batch).
// NOTE: prefill, chunked prefill, decode and draft verification are one rule: a sequence's
// computed tokens catch up with its tokens (+ drafts) under a per-step token budget. Running
// decodes go first (they protect inter-token latency), then running prefills in chunks, then
// waiting sequences first come first served. When the KV blocks run out, the most recently
// admitted running sequence is preempted (recomputed later), never the pool overrun.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace prism::engines::generate {

struct SchedulerLimits {
  int64_t max_step_tokens = 512;  // tokens computed per step over every sequence
  int max_running = 32;           // running sequences at most
  int block_size = 16;
  int watermark_blocks = 0;       // free blocks an admission must leave for running decodes
};

// A running sequence as the scheduler sees it.
struct RunningView {
  int64_t id = 0;
  int64_t num_computed = 0;  // tokens whose K/V is cached
  int64_t num_pending = 0;   // tokens to compute to catch up (uncomputed tokens + drafts), >= 1
  int num_blocks = 0;        // blocks in its table
  int copy_blocks = 0;       // 1 when its next write lands in a block it shares (copy on write)
  int num_freeable_blocks = 0;  // blocks only it references: what preempting it frees
  bool decoding = false;        // only its last token (and drafts) is uncomputed
};

// A waiting sequence (new, or preempted and to be recomputed).
struct WaitingView {
  int64_t id = 0;
  int64_t num_tokens = 0;  // to compute: the prompt, or prompt + output after a preemption
  int64_t num_cached = 0;  // leading tokens the prefix cache holds (whole blocks, < num_tokens)
  int num_cached_unreferenced = 0;  // hit blocks nobody references: retaining takes them from free
  int num_seqs = 1;        // running slots it takes (a request's n choices)
};

struct ScheduledSeq {
  int64_t id = 0;
  int64_t num_tokens = 0;  // tokens to compute this step, >= 1
};

struct StepPlan {
  std::vector<ScheduledSeq> running;   // in the order they go into the batch
  std::vector<ScheduledSeq> admitted;  // a first-come-first-served prefix of the waiting list
  std::vector<int64_t> preempted;      // running sequences to preempt, in order
  int64_t num_tokens = 0;
  bool empty() const { return running.empty() && admitted.empty(); }
};

// running: in admission order (oldest first). free_blocks: KvBlockPool::num_free().
StepPlan plan_step(std::span<const RunningView> running, std::span<const WaitingView> waiting, int free_blocks,
                   const SchedulerLimits& limits);

// Blocks a sequence with `num_blocks` blocks and `num_computed` cached tokens must gain to
// hold `num_tokens` more.
int blocks_to_grow(int64_t num_computed, int num_blocks, int64_t num_tokens, int block_size);

}  // namespace prism::engines::generate
