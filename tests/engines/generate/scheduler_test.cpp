// plan_step, table by table: decodes before prefills, chunked prefill under the token budget,
// FCFS admission with prefix hits, the running-sequence cap, preemption of the newest when
// blocks run out (never an overrun), drafts trimmed before anyone is preempted.
#include "engines/generate/scheduler.h"

#include <gtest/gtest.h>

#include <vector>

namespace prism::engines::generate {
namespace {

SchedulerLimits limits(int64_t budget, int max_running = 8) {
  SchedulerLimits l;
  l.max_step_tokens = budget;
  l.max_running = max_running;
  l.block_size = 4;
  return l;
}

RunningView decode(int64_t id, int64_t computed, int drafts = 0) {
  RunningView v;
  v.id = id;
  v.num_computed = computed;
  v.num_pending = 1 + drafts;
  v.num_blocks = int((computed + 3) / 4);
  v.num_freeable_blocks = v.num_blocks;
  v.decoding = true;
  return v;
}

RunningView prefill(int64_t id, int64_t computed, int64_t total) {
  RunningView v;
  v.id = id;
  v.num_computed = computed;
  v.num_pending = total - computed;
  v.num_blocks = int((computed + 3) / 4);
  v.num_freeable_blocks = v.num_blocks;
  return v;
}

WaitingView waiting(int64_t id, int64_t tokens, int64_t cached = 0, int unref = 0, int seqs = 1) {
  return {id, tokens, cached, unref, seqs};
}

std::vector<std::pair<int64_t, int64_t>> ids(const std::vector<ScheduledSeq>& v) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& s : v) out.emplace_back(s.id, s.num_tokens);
  return out;
}
using Pairs = std::vector<std::pair<int64_t, int64_t>>;

TEST(PlanStep, BlocksToGrow) {
  EXPECT_EQ(blocks_to_grow(0, 0, 1, 4), 1);
  EXPECT_EQ(blocks_to_grow(3, 1, 1, 4), 0);
  EXPECT_EQ(blocks_to_grow(4, 1, 1, 4), 1);
  EXPECT_EQ(blocks_to_grow(4, 3, 9, 4), 1);  // tables may already run past need
}

TEST(PlanStep, DecodesFirstThenChunkedPrefillsThenAdmissions) {
  // Running in admission order: a prefill (id 1) older than a decode (id 2).
  const std::vector<RunningView> run = {prefill(1, 4, 40), decode(2, 9)};
  const std::vector<WaitingView> wait = {waiting(3, 30), waiting(4, 5)};
  const StepPlan p = plan_step(run, wait, 100, limits(20));
  EXPECT_EQ(ids(p.running), (Pairs{{2, 1}, {1, 19}}));  // the prefill gets the rest of the budget
  EXPECT_TRUE(p.admitted.empty());
  EXPECT_EQ(p.num_tokens, 20);
  const StepPlan q = plan_step(run, wait, 100, limits(64));
  EXPECT_EQ(ids(q.running), (Pairs{{2, 1}, {1, 36}}));
  EXPECT_EQ(ids(q.admitted), (Pairs{{3, 27}}));  // a chunk of the next prompt
}

TEST(PlanStep, AdmissionStartsAfterThePrefixHitAndCountsUnreferencedHitBlocks) {
  // 21 tokens, 16 cached (4 blocks, 3 of them unreferenced): 5 to compute in 2 new blocks.
  const std::vector<WaitingView> wait = {waiting(1, 21, 16, 3)};
  StepPlan p = plan_step({}, wait, 5, limits(64));
  EXPECT_EQ(ids(p.admitted), (Pairs{{1, 5}}));
  // With only 4 free blocks the hit (3) leaves room for 4 tokens: a shorter chunk.
  p = plan_step({}, wait, 4, limits(64));
  EXPECT_EQ(ids(p.admitted), (Pairs{{1, 4}}));
  p = plan_step({}, wait, 3, limits(64));
  EXPECT_TRUE(p.admitted.empty());
}

TEST(PlanStep, AdmissionIsFcfsAndCappedByRunningSlots) {
  const std::vector<RunningView> run = {decode(1, 5), decode(2, 5)};
  // The head needs 3 slots (n = 3) and only 2 are left: nobody behind it jumps the queue.
  const std::vector<WaitingView> wait = {waiting(3, 4, 0, 0, 3), waiting(4, 4)};
  EXPECT_TRUE(plan_step(run, wait, 100, limits(64, 4)).admitted.empty());
  EXPECT_EQ(ids(plan_step(run, wait, 100, limits(64, 5)).admitted), (Pairs{{3, 4}}));
  EXPECT_EQ(ids(plan_step(run, wait, 100, limits(64, 6)).admitted), (Pairs{{3, 4}, {4, 4}}));
}

TEST(PlanStep, PreemptsTheNewestWhenADecodeNeedsABlock) {
  // Three decodes each at a block boundary (the next token needs a new block), one free block.
  const std::vector<RunningView> run = {decode(1, 8), decode(2, 8), decode(3, 8)};
  const StepPlan p = plan_step(run, std::vector{waiting(9, 3)}, 1, limits(64));
  // 1 takes the free block; 2 needs one: the newest (3) is preempted and frees its 2 blocks.
  EXPECT_EQ(ids(p.running), (Pairs{{1, 1}, {2, 1}}));
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{3}));
  EXPECT_TRUE(p.admitted.empty());  // no admission in a step that preempts
}

TEST(PlanStep, ADecodeWithNoNewerVictimPreemptsItself) {
  const std::vector<RunningView> run = {decode(1, 4), decode(2, 8)};
  // 2 is the newest: 1 takes the only block, 2 has no newer victim.
  const StepPlan p = plan_step(run, {}, 1, limits(64));
  EXPECT_EQ(ids(p.running), (Pairs{{1, 1}}));
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{2}));
}

TEST(PlanStep, DraftsAreTrimmedBeforeAnyoneIsPreempted) {
  // Computed 6 of 8 slots in 2 blocks; 1 + 4 drafts need 1 more block, none free: 2 fit.
  const std::vector<RunningView> run = {decode(1, 6, 4), decode(2, 5)};
  const StepPlan p = plan_step(run, {}, 0, limits(64));
  EXPECT_EQ(ids(p.running), (Pairs{{1, 2}, {2, 1}}));
  EXPECT_TRUE(p.preempted.empty());
}

TEST(PlanStep, CopyOnWriteBlockIsCounted) {
  RunningView v = decode(1, 6);
  v.copy_blocks = 1;  // its partial last block is shared
  EXPECT_TRUE(plan_step(std::vector{v}, {}, 1, limits(64)).preempted.empty());
  const StepPlan p = plan_step(std::vector{v}, {}, 0, limits(64));
  EXPECT_TRUE(p.running.empty());
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{1}));
}

TEST(PlanStep, APrefillShortOfBlocksPreemptsNewerOnesOrWaits) {
  // Two prefills at block boundaries, no free block: the older takes the newer's block.
  const std::vector<RunningView> run = {prefill(1, 8, 20), prefill(2, 4, 20)};
  const StepPlan p = plan_step(run, std::vector{waiting(3, 4)}, 0, limits(64));
  EXPECT_EQ(ids(p.running), (Pairs{{1, 4}}));
  EXPECT_EQ(p.preempted, (std::vector<int64_t>{2}));
  EXPECT_TRUE(p.admitted.empty());
  // A decode took the last block: the newer prefill waits, keeping its blocks.
  const std::vector<RunningView> run2 = {decode(1, 8), prefill(2, 4, 20)};
  const StepPlan q = plan_step(run2, {}, 1, limits(64));
  EXPECT_EQ(ids(q.running), (Pairs{{1, 1}}));
  EXPECT_TRUE(q.preempted.empty());
  // Nothing can move at all: the newest is preempted so the rest can go on next step.
  const StepPlan r = plan_step(std::vector{prefill(1, 8, 20)}, {}, 0, limits(64));
  EXPECT_TRUE(r.running.empty());
  EXPECT_EQ(r.preempted, (std::vector<int64_t>{1}));
}

TEST(PlanStep, NeverPlansMoreBlocksThanFree) {
  // Exhaustive over small states: the blocks the plan takes never exceed free + what its
  // preemptions free.
  for (int free = 0; free < 6; ++free)
    for (int64_t budget : {1, 3, 8, 64})
      for (int64_t c1 : {3, 4, 8})
        for (int64_t c2 : {1, 5, 12}) {
          const std::vector<RunningView> run = {decode(1, c1, 2), prefill(2, c2, 30)};
          const std::vector<WaitingView> wait = {waiting(3, 9, 4, 1), waiting(4, 13)};
          const StepPlan p = plan_step(run, wait, free, limits(budget));
          int available = free;
          for (int64_t id : p.preempted) available += run[size_t(id - 1)].num_freeable_blocks;
          int taken = 0;
          int64_t tokens = 0;
          for (const auto& s : p.running) {
            taken += blocks_to_grow(run[size_t(s.id - 1)].num_computed, run[size_t(s.id - 1)].num_blocks,
                                    s.num_tokens, 4);
            tokens += s.num_tokens;
          }
          for (const auto& s : p.admitted) {
            const WaitingView& w = wait[size_t(s.id - 3)];
            taken += int((s.num_tokens + 3) / 4) + w.num_cached_unreferenced;
            tokens += s.num_tokens;
          }
          EXPECT_LE(taken, available) << free << " " << budget << " " << c1 << " " << c2;
          EXPECT_LE(tokens, budget);
        }
}

}  // namespace
}  // namespace prism::engines::generate
