// engines/generate/scheduler.cpp: plan_step.
#include "engines/generate/scheduler.h"

#include <algorithm>

namespace prism::engines::generate {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Blocks a running sequence needs for n more tokens, its copy-on-write block included.
int blocks_needed(const RunningView& s, int64_t n, int block_size) {
  return blocks_to_grow(s.num_computed, s.num_blocks, n, block_size) + (n > 0 ? s.copy_blocks : 0);
}

// The most tokens (<= n) a running sequence can take with `free` blocks.
int64_t tokens_that_fit(const RunningView& s, int64_t n, int free, int block_size) {
  if (free < s.copy_blocks) return 0;
  const int64_t room = int64_t(s.num_blocks + free - s.copy_blocks) * block_size - s.num_computed;
  return std::clamp<int64_t>(room, 0, n);
}

}  // namespace

int blocks_to_grow(int64_t num_computed, int num_blocks, int64_t num_tokens, int block_size) {
  return int(std::max<int64_t>(0, ceil_div(num_computed + num_tokens, block_size) - num_blocks));
}

// NOTE: victims are the newest running sequences that are neither scheduled nor preempted
// yet and were admitted after the one that needs room; a decode with no such victim preempts
// itself, a prefill chunk waits. If a step would schedule nothing while sequences run, the
// newest is preempted so the others can move on (a lone sequence always fits: the engine
// refuses a pool smaller than one max-length sequence).
StepPlan plan_step(std::span<const RunningView> running, std::span<const WaitingView> waiting, int free_blocks,
                   const SchedulerLimits& lim) {
  StepPlan plan;
  const int bs = lim.block_size;
  int64_t budget = lim.max_step_tokens;
  int free = free_blocks;
  std::vector<char> done(running.size(), 0);  // scheduled or preempted
  int alive = int(running.size());

  auto preempt = [&](size_t i) {
    done[i] = 1;
    --alive;
    free += running[i].num_freeable_blocks;
    plan.preempted.push_back(running[i].id);
  };
  auto newest_victim = [&](size_t self) -> int {
    for (size_t j = running.size(); j-- > self + 1;)
      if (!done[j]) return int(j);
    return -1;
  };
  auto schedule = [&](size_t i) {
    const RunningView& s = running[i];
    int64_t n = std::min(s.num_pending, budget);
    if (n <= 0) return;
    while (blocks_needed(s, n, bs) > free) {
      // A shorter chunk (prefill) or fewer drafts (decode: at least its one real token).
      const int64_t fit = tokens_that_fit(s, n, free, bs);
      if (fit >= 1) {
        n = fit;
        break;
      }
      const int victim = newest_victim(i);
      if (victim >= 0) {
        preempt(size_t(victim));
        continue;
      }
      if (s.decoding) preempt(i);
      return;  // a prefill chunk waits for room
    }
    done[i] = 1;
    free -= blocks_needed(s, n, bs);
    budget -= n;
    plan.num_tokens += n;
    plan.running.push_back({s.id, n});
  };

  for (size_t i = 0; i < running.size() && budget > 0; ++i)
    if (!done[i] && running[i].decoding) schedule(i);
  for (size_t i = 0; i < running.size() && budget > 0; ++i)
    if (!done[i] && !running[i].decoding) schedule(i);

  if (plan.running.empty() && alive > 0 && budget > 0) {
    // Nothing could move: free the newest so the older ones progress next step.
    for (size_t j = running.size(); j-- > 0;)
      if (!done[j]) {
        preempt(j);
        break;
      }
    return plan;
  }
  if (!plan.preempted.empty()) return plan;  // the pool is short: admit nobody this step

  int slots = lim.max_running - alive;
  for (const WaitingView& w : waiting) {
    if (budget <= 0 || w.num_seqs > slots) break;
    const int64_t n = std::min(w.num_tokens - w.num_cached, budget);
    // NOTE: num_cached is whole blocks, so the chunk starts at a block boundary.
    const int64_t room = int64_t(free - lim.watermark_blocks - w.num_cached_unreferenced) * bs;
    const int64_t fit = std::min(n, room);
    if (n <= 0 || fit <= 0) break;
    const int need = int(ceil_div(fit, bs)) + w.num_cached_unreferenced;
    free -= need;
    budget -= fit;
    slots -= w.num_seqs;
    plan.num_tokens += fit;
    plan.admitted.push_back({w.id, fit});
  }
  return plan;
}

}  // namespace prism::engines::generate
