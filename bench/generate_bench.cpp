// generate_bench: the autoregressive path's speed, memory and KV-quantisation quality, each
// figure against a ceiling or a peer measured in the same run (the machine is shared: its
// memory bandwidth swings 2x from minute to minute).
//
//   build/bench/generate_bench --model DIR [--precision bf16] [--modes LIST] [--no-peer] ...
//
// DIR is a Llama-family checkpoint, e.g. real-size random bf16 weights from
//   /usr/bin/python3 bench/generate_peer.py write --config smollm2-360m --out /tmp/smollm2-360m
//   /usr/bin/python3 bench/generate_peer.py write --config llama-3.2-1b --out /tmp/llama-3.2-1b
// Modes (default: all), in the order they run:
//   memory   RSS of a loaded chat deployment (after the engine modes' work) against its
//            weights + KV budget
//   ttft     time to first token of a --ttft-prompt-token prompt, cold, then sharing a
//            --ttft-prefix-token prefix already in the prefix cache (target >= 10x)
//   streams  aggregate tokens/s at --streams concurrent greedy streams (1,4,16), and the
//            engine's decode tokens/s at batch 1 against the bandwidth roofline
//   decode   the model alone (models/decoder.h, own paged cache): decode tokens/s at batch 1
//            as a fraction of the roofline (weight + KV bytes per token / read GB/s)
//   prefill  the model alone: prefill tokens/s (512 and 2048 tokens) as a fraction of the GEMM
//            peak at the same precision
//   kv       KV-cache precision: greedy-token agreement and mean KL(bf16 || X) of next-token
//            distributions for X = f32, int8 against a bf16 cache, over --kv-prompts prompts x
//            --kv-tokens teacher-forced greedy tokens; tokens that fit in --kv-budget-mib
//   peer     bench/generate_peer.py on the same weights: decode at batch 1 (KV cache),
//            prefill 512 / 2048, and its greedy tokens against Prism's
//   precisions  the model alone at each linear precision (f32, bf16, int8; --precision is
//            ignored here): decode at batch 1 against the bandwidth roofline and prefill 512 as
//            GFLOP/s against the tier's f32 GEMM peak, all measured in the same process, with
//            the ratios to f32 (not in the default modes: it loads the model three times)
// Without PRISM_ISA the whole run is repeated on every instruction-set tier the CPU has, each in
// a process of its own (bench/bench_tiers.h); PRISM_ISA=avx2|avx512|avx512_bf16 runs one.
// Engine modes go through a serving::Deployment of task "chat" (register_generate_engine),
// as `prism serve` runs it; requests are GenerateInput token ids (greedy, ignore_eos).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench/bench_tiers.h"
#include "bench/memory_bandwidth.h"
#include "engines/generate/generate_engine.h"
#include "engines/generate/kv_cache.h"
#include "frontends/generate_payload.h"
#include "models/decoder.h"
#include "models/llama/llama.h"
#include "runtime/arena.h"
#include "runtime/gemm_peak.h"
#include "runtime/threads.h"
#include "serving/config.h"
#include "serving/deployment.h"
#include "serving/metrics.h"

namespace {

namespace gen = prism::engines::generate;
using prism::DType;
using prism::Tensor;
using prism::ops::Precision;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
double seconds_since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }

struct Options {
  std::string model;
  std::string precision = "bf16";
  std::set<std::string> modes = {"memory", "ttft", "streams", "decode", "prefill", "kv", "peer"};
  int decode_context = 128;  // prompt before the timed decode steps
  int decode_tokens = 64;
  int ttft_prompt = 2048;
  int ttft_prefix = 1920;
  std::vector<int> streams = {1, 4, 16};
  int stream_prompt = 128;
  int stream_tokens = 64;
  int kv_prompts = 16;
  int kv_tokens = 64;
  int64_t kv_budget_mib = 1024;   // the "tokens that fit" budget of the kv mode
  int64_t kv_cache_mib = 0;       // the deployment's kv_cache_bytes; 0: enough for the modes
  int64_t max_model_len = 4096;   // the deployment's max_model_len (Llama 3.2 says 131072)
  uint32_t seed = 7;
};

std::vector<int> parse_int_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::atoi(item.c_str()));
  return out;
}

std::vector<int32_t> random_tokens(int n, int64_t vocab, std::mt19937& rng) {
  // Ids below vocab - 1: the last id is <|endoftext|> in generate_peer.py's checkpoints.
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(std::max<int64_t>(2, vocab - 2)));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = id(rng);
  return v;
}

// ---- /proc/self/status ----------------------------------------------------------------------

struct MemoryStatus {
  int64_t rss = 0, anon = 0, file = 0;  // bytes
};

MemoryStatus memory_status() {
  MemoryStatus m;
  std::ifstream f("/proc/self/status");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key) {
    if (key == "VmRSS:" || key == "RssAnon:" || key == "RssFile:") {
      f >> kb >> unit;
      if (key == "VmRSS:") m.rss = kb << 10;
      if (key == "RssAnon:") m.anon = kb << 10;
      if (key == "RssFile:") m.file = kb << 10;
    } else {
      std::string rest;
      std::getline(f, rest);
    }
  }
  return m;
}

double mib(int64_t bytes) { return double(bytes) / double(1 << 20); }

// ---- the model alone: one paged cache per sequence slot --------------------------------------

// NOTE: sequence s owns blocks [s * blocks_per_seq, (s + 1) * blocks_per_seq), filled from
// offset 0 in order, as the i8 cache's store_kv requires.
class PagedRunner {
 public:
  PagedRunner(prism::models::Decoder& model, int num_seqs, int max_len, DType dtype, int block_size = 16)
      : model_(model),
        block_size_(block_size),
        blocks_per_seq_((max_len + block_size - 1) / block_size),
        kv_(model.kv_spec(), num_seqs * blocks_per_seq_, block_size, dtype),
        cached_(size_t(num_seqs), 0) {
    tables_.resize(size_t(num_seqs) * blocks_per_seq_);
    for (size_t i = 0; i < tables_.size(); ++i) tables_[i] = static_cast<int32_t>(i);
  }

  // Appends chunks[s] to sequence s (at most num_seqs chunks; empty ones skip their
  // sequence); returns the logits of each stepped sequence's last new token, in order:
  // [stepped sequences, vocab] f32.
  Tensor step(const std::vector<std::vector<int32_t>>& chunks) {
    int n = 0;
    std::vector<int32_t> ids, pos, slots, cu = {0}, ctx, rows, tables;
    for (int s = 0; s < static_cast<int>(chunks.size()); ++s) {
      if (chunks[s].empty()) continue;
      ++n;
      tables.insert(tables.end(), tables_.begin() + s * blocks_per_seq_, tables_.begin() + (s + 1) * blocks_per_seq_);
      for (size_t i = 0; i < chunks[s].size(); ++i) {
        const int p = cached_[s] + static_cast<int>(i);
        ids.push_back(chunks[s][i]);
        pos.push_back(p);
        slots.push_back((s * blocks_per_seq_ + p / block_size_) * block_size_ + p % block_size_);
      }
      cached_[s] += static_cast<int>(chunks[s].size());
      cu.push_back(static_cast<int32_t>(ids.size()));
      ctx.push_back(cached_[s]);
      rows.push_back(static_cast<int32_t>(ids.size()) - 1);
    }
    const auto t = static_cast<int64_t>(ids.size());
    prism::models::DecoderBatch b;
    b.token_ids = Tensor::from<int32_t>(ids, {t});
    b.positions = Tensor::from<int32_t>(pos, {t});
    b.slot_mapping = Tensor::from<int32_t>(slots, {t});
    b.cu_seqlens_q = Tensor::from<int32_t>(cu, {n + 1});
    b.block_tables = Tensor::from<int32_t>(tables, {n, blocks_per_seq_});
    b.context_lens = Tensor::from<int32_t>(ctx, {n});
    b.logits_rows = Tensor::from<int32_t>(rows, {n});
    // As the engine does: activations from an arena reset every step (the logits are copied
    // out first), so the hot loop does not call malloc.
    arena_.reset();
    Tensor logits;
    {
      prism::ArenaScope scope(&arena_);
      logits = model_.forward(b, kv_.layers());
    }
    return logits.clone();  // outside the scope: on the heap
  }

 private:
  prism::models::Decoder& model_;
  int block_size_;
  int blocks_per_seq_;
  gen::KvCache kv_;
  std::vector<int> cached_;
  std::vector<int32_t> tables_;
  prism::Arena arena_;
};

int32_t argmax_row(const Tensor& logits, int64_t row) {
  const int64_t v = logits.shape()[1];
  const float* l = logits.data<float>() + row * v;
  return static_cast<int32_t>(std::max_element(l, l + v) - l);
}

// KV bytes of one cached token over every layer, K and V, at the cache dtype: what a decode
// step reads per context token (i8's scales, one f32 per block and head, are left out: under
// 1% of the bytes at block 16 and head_dim 64).
int64_t kv_bytes_per_token(const prism::models::KvSpec& s, DType dtype) {
  return int64_t(s.num_layers) * 2 * s.num_kv_heads * s.head_dim * int64_t(prism::dtype_size(dtype));
}

// The median: on this shared machine a step now and then waits 100+ ms for a core, which says
// nothing about Prism; the mean is printed beside it.
double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct DecodeFigure {
  double tokens_per_s = 0;       // 1 / median step
  double mean_tokens_per_s = 0;  // steps / total time
  double roofline_tokens_per_s = 0, gbs = 0;
  std::vector<float> prompt_logits;  // after the prompt: the same-weights check with the peer
  std::vector<int32_t> greedy;
};

// Batch 1: prefill `context` tokens, then `tokens` greedy steps, timed.
DecodeFigure model_decode(prism::models::Decoder& m, const std::vector<int32_t>& prompt, int tokens, DType kv_dtype,
                          double read_gbs) {
  PagedRunner r(m, 1, static_cast<int>(prompt.size()) + tokens + 1, kv_dtype);
  Tensor logits = r.step({prompt});
  DecodeFigure f;
  f.prompt_logits.assign(logits.data<float>(), logits.data<float>() + logits.numel());
  std::vector<double> steps;  // ms
  const auto t0 = Clock::now();
  for (int i = 0; i < tokens; ++i) {
    f.greedy.push_back(argmax_row(logits, 0));
    const auto t1 = Clock::now();
    logits = r.step({{f.greedy.back()}});
    steps.push_back(seconds_since(t1) * 1e3);
  }
  f.mean_tokens_per_s = tokens / seconds_since(t0);
  f.tokens_per_s = 1e3 / median(steps);
  const double context = double(prompt.size()) + tokens / 2.0;
  const double bytes = double(m.weight_bytes()) + context * double(kv_bytes_per_token(m.kv_spec(), kv_dtype));
  f.roofline_tokens_per_s = read_gbs * 1e9 / bytes;
  f.gbs = bytes * f.tokens_per_s / 1e9;
  return f;
}

// One forward over n fresh tokens, the faster of two (the first also grows the arena and
// touches the cache's pages): tokens/s and GFLOP/s.
std::pair<double, double> model_prefill(prism::models::Decoder& m, int n, DType kv_dtype, std::mt19937& rng) {
  PagedRunner r(m, 2, n, kv_dtype);
  double best = 1e30;
  for (int rep = 0; rep < 2; ++rep) {
    std::vector<std::vector<int32_t>> chunks(size_t(rep) + 1);  // rep 1: sequence 1, fresh blocks
    chunks[size_t(rep)] = random_tokens(n, m.vocab_size(), rng);
    if (rep == 1) chunks[0].clear();
    const auto t0 = Clock::now();
    r.step(chunks);
    best = std::min(best, seconds_since(t0));
  }
  return {n / best, m.flops(n, 0) / best * 1e-9};
}

// ---- the kv mode ------------------------------------------------------------------------------

struct Divergence {
  int64_t agree = 0, total = 0;
  double kl_sum = 0, kl_max = 0;
};

// log-softmax of a row, in place into out.
void log_softmax(const float* l, int64_t v, std::vector<double>& out) {
  out.resize(size_t(v));
  const double mx = *std::max_element(l, l + v);
  double sum = 0;
  for (int64_t i = 0; i < v; ++i) sum += std::exp(double(l[i]) - mx);
  const double lse = mx + std::log(sum);
  for (int64_t i = 0; i < v; ++i) out[size_t(i)] = double(l[i]) - lse;
}

void run_kv_mode(prism::models::Decoder& m, const Options& o, std::mt19937& rng) {
  const prism::models::KvSpec spec = m.kv_spec();
  const int64_t v = m.vocab_size();
  std::uniform_int_distribution<int> len(32, 256);
  std::vector<std::vector<int32_t>> prompts;
  int longest = 0;
  for (int i = 0; i < o.kv_prompts; ++i) {
    prompts.push_back(random_tokens(len(rng), v, rng));
    longest = std::max<int>(longest, static_cast<int>(prompts.back().size()));
  }
  const int max_len = longest + o.kv_tokens + 1;
  const DType tested[] = {DType::f32, DType::i8};
  PagedRunner ref(m, o.kv_prompts, max_len, DType::bf16);
  std::vector<std::unique_ptr<PagedRunner>> runs;
  for (DType d : tested) runs.push_back(std::make_unique<PagedRunner>(m, o.kv_prompts, max_len, d));
  std::vector<Divergence> div(std::size(tested));
  std::vector<double> lp_ref, lp;
  double entropy_sum = 0, top1_sum = 0;
  int64_t rows = 0;

  std::vector<std::vector<int32_t>> chunks = prompts;
  for (int step = 0; step < o.kv_tokens; ++step) {
    const Tensor lr = ref.step(chunks);
    std::vector<Tensor> lq;
    for (auto& r : runs) lq.push_back(r->step(chunks));
    for (int s = 0; s < o.kv_prompts; ++s) {
      log_softmax(lr.data<float>() + s * v, v, lp_ref);
      const int32_t next = argmax_row(lr, s);
      double entropy = 0;
      for (int64_t i = 0; i < v; ++i) entropy -= std::exp(lp_ref[size_t(i)]) * lp_ref[size_t(i)];
      entropy_sum += entropy;
      top1_sum += std::exp(lp_ref[size_t(next)]);
      ++rows;
      for (size_t d = 0; d < runs.size(); ++d) {
        log_softmax(lq[d].data<float>() + s * v, v, lp);
        double kl = 0;
        for (int64_t i = 0; i < v; ++i) kl += std::exp(lp_ref[size_t(i)]) * (lp_ref[size_t(i)] - lp[size_t(i)]);
        div[d].kl_sum += kl;
        div[d].kl_max = std::max(div[d].kl_max, kl);
        div[d].agree += argmax_row(lq[d], s) == next ? 1 : 0;
        ++div[d].total;
      }
      chunks[size_t(s)] = {next};  // teacher forcing: every cache sees the bf16 run's tokens
    }
  }
  std::printf("\nKV-cache precision (%d prompts of 32..256 random tokens x %d greedy tokens, teacher-forced on the "
              "bf16-KV run; model %s weights)\n",
              o.kv_prompts, o.kv_tokens, o.precision.c_str());
  std::printf("reference distributions: mean entropy %.3f nats (uniform: %.3f), mean top-1 p %.3f\n",
              entropy_sum / double(rows), std::log(double(v)), top1_sum / double(rows));
  const int64_t budget = o.kv_budget_mib << 20;
  const int64_t bf16_tokens = budget / gen::kv_bytes_per_block(spec, 16, DType::bf16) * 16;
  std::printf("%-6s %12s %14s %12s %16s %14s %10s\n", "KV", "agreement", "mean KL", "max KL", "bytes/token",
              "tokens in budget", "vs bf16");
  auto row = [&](const char* name, DType d, const Divergence* dv) {
    const int64_t per_block = gen::kv_bytes_per_block(spec, 16, d);
    const int64_t tokens = budget / per_block * 16;
    if (dv == nullptr)
      std::printf("%-6s %12s %14s %12s %16.1f %14lld %9.2fx\n", name, "(ref)", "-", "-", per_block / 16.0,
                  static_cast<long long>(tokens), double(tokens) / double(bf16_tokens));
    else
      std::printf("%-6s %11.2f%% %14.3e %12.3e %16.1f %14lld %9.2fx\n", name, 100.0 * double(dv->agree) / double(dv->total),
                  dv->kl_sum / double(dv->total), dv->kl_max, per_block / 16.0, static_cast<long long>(tokens),
                  double(tokens) / double(bf16_tokens));
  };
  row("bf16", DType::bf16, nullptr);
  row("f32", DType::f32, &div[0]);
  row("int8", DType::i8, &div[1]);
  std::printf("(budget %lld MiB, block 16; bytes/token includes int8's per-block, per-head scales)\n",
              static_cast<long long>(o.kv_budget_mib));
}

// ---- engine modes: a chat deployment --------------------------------------------------------

// One request's stream, filled by the completion and partial callbacks (replica thread).
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  Clock::time_point submitted, done_at;
  std::vector<std::pair<Clock::time_point, int>> chunks;  // arrival, tokens
  bool done = false;
  prism::Status status;
  int64_t completion_tokens = 0, cached_prompt_tokens = 0;

  void wait() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done; });
  }
  double ttft() const { return chunks.empty() ? 0.0 : seconds_between(submitted, chunks.front().first); }
  int tokens() const {
    int n = 0;
    for (const auto& c : chunks) n += c.second;
    return n;
  }
};

std::shared_ptr<Stream> submit(prism::serving::Deployment& d, std::vector<int32_t> prompt, int max_tokens) {
  auto st = std::make_shared<Stream>();
  auto in = std::make_unique<prism::frontends::GenerateInput>();
  const auto cost = static_cast<int64_t>(prompt.size());
  in->prompt = std::move(prompt);
  in->sampling.temperature = 0.0f;
  in->sampling.max_tokens = max_tokens;
  in->sampling.ignore_eos = true;
  auto req = prism::serving::make_request(std::move(in), [st](prism::Result<prism::serving::PayloadPtr> r) {
    std::lock_guard lock(st->mu);
    st->done_at = Clock::now();
    if (r.has_value()) {
      if (const auto* out = dynamic_cast<const prism::frontends::GenerateOutput*>(r->get())) {
        st->completion_tokens = out->completion_tokens;
        st->cached_prompt_tokens = out->cached_prompt_tokens;
      }
    } else {
      st->status = r.status();
    }
    st->done = true;
    st->cv.notify_all();
  });
  req->cost_tokens = std::max<int64_t>(1, cost);
  req->on_partial = [st](prism::serving::PayloadPtr p) {
    const auto* chunk = dynamic_cast<const prism::frontends::GenerateChunk*>(p.get());
    if (chunk == nullptr) return;
    int n = 0;
    for (const prism::frontends::ChoiceDelta& delta : chunk->deltas) n += static_cast<int>(delta.tokens.size());
    std::lock_guard lock(st->mu);
    st->chunks.emplace_back(Clock::now(), n);
  };
  st->submitted = Clock::now();
  const prism::Status s = d.submit(req);
  if (!s.ok()) {
    std::lock_guard lock(st->mu);
    st->status = s;
    st->done = true;
  }
  return st;
}

bool check(const Stream& s, const char* what) {
  if (s.status.ok()) return true;
  std::fprintf(stderr, "generate_bench: %s: %s\n", what, s.status.to_string().c_str());
  return false;
}

struct EngineFigures {
  bool ok = false;
  double ttft_cold_s = 0, ttft_warm_s = 0;
  int64_t warm_cached = 0;
  double decode_tokens_per_s = 0;       // batch 1: 1 / the median gap between tokens
  double decode_mean_tokens_per_s = 0;  // batch 1: between its first and last token
};

// "Cold" means the prefix cache has nothing of the prompt, not a cold process: a first prompt
// of the same length, not timed, grows the engine's arena and touches KV pages.
void run_ttft(prism::serving::Deployment& d, const Options& o, int64_t vocab, std::mt19937& rng, EngineFigures& f) {
  auto warm_up = submit(d, random_tokens(o.ttft_prompt, vocab, rng), 1);
  warm_up->wait();
  if (!check(*warm_up, "warm-up prompt")) return;
  const std::vector<int32_t> prefix = random_tokens(o.ttft_prefix, vocab, rng);
  auto with_suffix = [&] {
    std::vector<int32_t> p = prefix;
    const std::vector<int32_t> s = random_tokens(o.ttft_prompt - o.ttft_prefix, vocab, rng);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  auto cold = submit(d, with_suffix(), 1);
  cold->wait();
  if (!check(*cold, "cold prompt")) return;
  auto warm = submit(d, with_suffix(), 1);
  warm->wait();
  if (!check(*warm, "prompt sharing the prefix")) return;
  f.ttft_cold_s = cold->ttft();
  f.ttft_warm_s = warm->ttft();
  f.warm_cached = warm->cached_prompt_tokens;
  std::printf("\ntime to first token, %d-token prompt: cold %.3f s; sharing a cached %d-token prefix %.3f s "
              "(%lld prompt tokens from the cache): %.1fx faster (target >= 10x)\n",
              o.ttft_prompt, f.ttft_cold_s, o.ttft_prefix, f.ttft_warm_s, static_cast<long long>(f.warm_cached),
              f.ttft_warm_s > 0 ? f.ttft_cold_s / f.ttft_warm_s : 0.0);
}

void run_streams(prism::serving::Deployment& d, const Options& o, int64_t vocab, std::mt19937& rng, double read_gbs,
                 int64_t weight_bytes, int64_t kv_token_bytes, EngineFigures& f, int64_t& peak_rss) {
  std::printf("\nconcurrent greedy streams (%d-token prompts, %d tokens each)\n", o.stream_prompt, o.stream_tokens);
  std::printf("%-8s %12s %14s %12s %12s\n", "streams", "tokens/s", "decode tok/s", "mean TTFT s", "mean ITL ms");
  for (int n : o.streams) {
    std::vector<std::shared_ptr<Stream>> streams;
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) streams.push_back(submit(d, random_tokens(o.stream_prompt, vocab, rng), o.stream_tokens));
    Clock::time_point end = t0, all_started = t0, first_done = Clock::time_point::max();
    int total = 0;
    double ttft = 0, itl = 0;
    bool ok = true;
    for (auto& s : streams) {
      s->wait();
      ok = ok && check(*s, "stream");
      if (!ok || s->chunks.empty()) continue;
      end = std::max(end, s->done_at);
      all_started = std::max(all_started, s->chunks.front().first);
      first_done = std::min(first_done, s->chunks.back().first);
      total += s->tokens();
      ttft += s->ttft();
      if (s->tokens() > 1)
        itl += seconds_between(s->chunks.front().first, s->chunks.back().first) / (s->tokens() - 1);
    }
    if (!ok) return;
    peak_rss = std::max(peak_rss, memory_status().rss);
    // Steady state: tokens that arrived while every stream was decoding.
    int steady = 0;
    for (auto& s : streams)
      for (const auto& [t, k] : s->chunks)
        if (t > all_started && t <= first_done) steady += k;
    const double window = seconds_between(all_started, first_done);
    const double decode = window > 0 && steady > 0 ? steady / window : 0.0;
    std::printf("%-8d %12.1f %14.1f %12.3f %12.1f\n", n, total / seconds_between(t0, end), decode, ttft / n,
                1e3 * itl / n);
    if (n == 1) {  // per token: the median gap between chunks of one token
      const Stream& s = *streams[0];
      std::vector<double> gaps;
      for (size_t i = 1; i < s.chunks.size(); ++i)
        if (s.chunks[i].second == 1) gaps.push_back(seconds_between(s.chunks[i - 1].first, s.chunks[i].first));
      f.decode_tokens_per_s = gaps.empty() ? 0.0 : 1.0 / median(gaps);
      f.decode_mean_tokens_per_s =
          s.tokens() > 1 ? (s.tokens() - 1) / seconds_between(s.chunks.front().first, s.chunks.back().first) : 0.0;
    }
  }
  if (f.decode_tokens_per_s > 0) {
    const double context = o.stream_prompt + o.stream_tokens / 2.0;
    const double roof = read_gbs * 1e9 / (double(weight_bytes) + context * double(kv_token_bytes));
    std::printf("engine decode at batch 1: %.2f tokens/s (median gap; mean %.2f) = %.0f%% of the roofline %.2f "
                "tokens/s (%.1f GB/s read)\n",
                f.decode_tokens_per_s, f.decode_mean_tokens_per_s, 100.0 * f.decode_tokens_per_s / roof, roof, read_gbs);
  }
}

// ---- the peer ------------------------------------------------------------------------------------

struct PeerFigures {
  bool ok = false;
  double decode_tokens_per_s = 0, decode_context = 0;
  double prefill_512 = 0, prefill_2048 = 0;
  std::vector<float> prompt_logits;
  std::vector<int32_t> greedy;
};

PeerFigures run_peer(const Options& o, const std::vector<int32_t>& prompt, int greedy_tokens) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("prism_generate_bench_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string prompt_path = dir + "/prompt.json", out = dir + "/peer.json";
  std::ofstream(prompt_path) << nlohmann::json(prompt).dump();
  const std::string cmd = "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " PRISM_SOURCE_DIR
                          "/bench/generate_peer.py run --model '" +
                          o.model + "' --out '" + out + "' --dtype " + (o.precision == "f32" ? "f32" : "bf16") +
                          " --threads " + std::to_string(prism::num_threads()) + " --context " +
                          std::to_string(o.decode_context) + " --decode-tokens 32 --prefill 512," +
                          std::to_string(o.ttft_prompt) + " --prompt '" + prompt_path + "' --greedy-tokens " +
                          std::to_string(greedy_tokens);
  PeerFigures p;
  if (std::system(cmd.c_str()) == 0) {
    std::ifstream f(out);
    const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
    if (!j.is_discarded()) {
      p.ok = true;
      p.decode_tokens_per_s = j.value("decode_tokens_per_s", 0.0);
      p.decode_context = j.value("decode_context", 0.0);
      p.prefill_512 = j["prefill"].value("512", 0.0);
      p.prefill_2048 = j["prefill"].value(std::to_string(o.ttft_prompt), 0.0);
      p.greedy = j.value("greedy", std::vector<int32_t>{});
      p.prompt_logits = j.value("prompt_logits", std::vector<float>{});
    }
  }
  std::filesystem::remove_all(dir);
  return p;
}

// The precisions mode (see the top): one row per linear precision, measured in this process.
// The machine's read bandwidth swings by up to 2x between seconds, so the three models are
// loaded side by side and measured in interleaved rounds (each decode with its own bandwidth
// probe); a row gives the median over rounds, and each ratio is the median of the rounds'
// ratios (both sides of a ratio measured seconds apart).
void run_precisions(const Options& o, std::mt19937& rng) {
  struct Row {
    Precision precision = Precision::f32;
    std::unique_ptr<prism::models::Decoder> model;
    DType kv = DType::bf16;
    std::vector<double> decode_tps, roofline_share, prefill_tps, prefill_gflops;
  };
  constexpr int kRounds = 3;
  std::vector<Row> rows;
  const prism::Result<double> f32_peak = prism::measure_gemm_peak(Precision::f32);
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    auto loaded = prism::models::load_llama(o.model, p);
    if (!loaded.has_value()) {
      std::printf("precision %s: %s\n", std::string(prism::ops::precision_name(p)).c_str(),
                  loaded.status().to_string().c_str());
      continue;
    }
    Row r;
    r.precision = p;
    r.model = std::move(*loaded);
    r.kv = p == Precision::f32 ? DType::f32 : DType::bf16;  // kv_cache_dtype "auto"
    model_decode(*r.model, random_tokens(8, r.model->vocab_size(), rng), 2, r.kv, 1.0);  // warm-up
    model_prefill(*r.model, 64, r.kv, rng);                                              // warm-up
    rows.push_back(std::move(r));
  }
  if (rows.empty()) return;
  for (int round = 0; round < kRounds; ++round)
    for (Row& r : rows) {
      const std::vector<int32_t> prompt = random_tokens(o.decode_context, r.model->vocab_size(), rng);
      const DecodeFigure d =
          model_decode(*r.model, prompt, o.decode_tokens, r.kv, prism::bench::measure_read_bandwidth_gbs());
      r.decode_tps.push_back(d.tokens_per_s);
      r.roofline_share.push_back(d.tokens_per_s / d.roofline_tokens_per_s);
      const auto [tps, gflops] = model_prefill(*r.model, 512, r.kv, rng);
      r.prefill_tps.push_back(tps);
      r.prefill_gflops.push_back(gflops);
    }
  // The median over rounds of a[i] / b[i].
  auto median_ratio = [](const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> q;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) q.push_back(a[i] / b[i]);
    return median(q);
  };
  const double peak = f32_peak.has_value() ? *f32_peak : 0.0;
  std::printf("\nprecisions on the %s tier (f32 GEMM peak %.0f GFLOP/s; decode at batch 1, context %d; median of %d "
              "interleaved rounds; ratios against f32, > 1: faster)\n",
              std::string(prism::isa_name(prism::active_isa())).c_str(), peak, o.decode_context, kRounds);
  std::printf("%-6s %12s %10s %8s %14s %10s %10s %8s\n", "", "decode tok/s", "% roofline", "vs f32",
              "prefill 512 t/s", "GFLOP/s", "% f32 peak", "vs f32");
  const Row& f32 = rows.front();
  for (const Row& r : rows)
    std::printf("%-6s %12.2f %9.0f%% %7.2fx %14.1f %10.0f %9.0f%% %7.2fx\n",
                std::string(prism::ops::precision_name(r.precision)).c_str(), median(r.decode_tps),
                100.0 * median(r.roofline_share), median_ratio(r.decode_tps, f32.decode_tps), median(r.prefill_tps),
                median(r.prefill_gflops), peak > 0 ? 100.0 * median(r.prefill_gflops) / peak : 0.0,
                median_ratio(r.prefill_tps, f32.prefill_tps));
  if (rows.size() == 3)
    std::printf("int8 / bf16: decode %.2fx, prefill 512 %.2fx\n", median_ratio(rows[2].decode_tps, rows[1].decode_tps),
                median_ratio(rows[2].prefill_tps, rows[1].prefill_tps));
}

int usage() {
  std::fprintf(stderr,
               "usage: generate_bench --model DIR [--precision f32|bf16|int8] [--modes memory,ttft,streams,decode,"
               "prefill,kv,peer,precisions] [--no-peer]\n"
               "       [--decode-context N] [--decode-tokens N] [--ttft-prompt N] [--ttft-prefix N] [--streams 1,4,16]\n"
               "       [--stream-prompt N] [--stream-tokens N] [--kv-prompts N] [--kv-tokens N] [--kv-budget-mib N]\n"
               "       [--kv-cache-mib N] [--max-model-len N] [--seed S]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> done = prism::bench::run_on_each_tier(argc, argv)) return *done;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--model") o.model = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--modes") {
      o.modes.clear();
      std::stringstream ss(next());
      std::string m;
      while (std::getline(ss, m, ',')) o.modes.insert(m);
    } else if (a == "--no-peer") o.modes.erase("peer");
    else if (a == "--decode-context") o.decode_context = std::atoi(next().c_str());
    else if (a == "--decode-tokens") o.decode_tokens = std::atoi(next().c_str());
    else if (a == "--ttft-prompt") o.ttft_prompt = std::atoi(next().c_str());
    else if (a == "--ttft-prefix") o.ttft_prefix = std::atoi(next().c_str());
    else if (a == "--streams") o.streams = parse_int_list(next());
    else if (a == "--stream-prompt") o.stream_prompt = std::atoi(next().c_str());
    else if (a == "--stream-tokens") o.stream_tokens = std::atoi(next().c_str());
    else if (a == "--kv-prompts") o.kv_prompts = std::atoi(next().c_str());
    else if (a == "--kv-tokens") o.kv_tokens = std::atoi(next().c_str());
    else if (a == "--kv-budget-mib") o.kv_budget_mib = std::atoll(next().c_str());
    else if (a == "--kv-cache-mib") o.kv_cache_mib = std::atoll(next().c_str());
    else if (a == "--max-model-len") o.max_model_len = std::atoll(next().c_str());
    else if (a == "--seed") o.seed = static_cast<uint32_t>(std::atoi(next().c_str()));
    else return usage();
  }
  const std::set<std::string> known = {"memory", "ttft", "streams", "decode", "prefill", "kv", "peer", "precisions"};
  for (const std::string& m : o.modes)
    if (!known.count(m)) {
      std::fprintf(stderr, "generate_bench: unknown mode '%s'\n", m.c_str());
      return usage();
    }
  if (o.model.empty()) return usage();
  auto precision = prism::ops::parse_precision(o.precision);
  if (!precision.has_value() || o.ttft_prefix >= o.ttft_prompt || o.decode_tokens < 2 || o.kv_prompts < 1 ||
      o.kv_tokens < 1 || o.streams.empty()) {
    std::fprintf(stderr, "generate_bench: bad arguments\n");
    return usage();
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // figures appear as they are measured
  prism::set_num_threads(0);
  std::mt19937 rng(o.seed);
  const DType kv_dtype = *precision == Precision::f32 ? DType::f32 : DType::bf16;  // kv_cache_dtype "auto"
  std::printf("model %s, precision %s, KV %s, %d threads, %s kernels\n", o.model.c_str(), o.precision.c_str(),
              std::string(prism::dtype_name(kv_dtype)).c_str(), prism::num_threads(),
              std::string(prism::isa_name(prism::active_isa())).c_str());

  // ---- engine modes: one deployment, as `prism serve` builds it ----
  EngineFigures ef;
  int64_t vocab = 0;
  const bool engine = o.modes.count("memory") || o.modes.count("ttft") || o.modes.count("streams");
  if (engine) {
    const MemoryStatus base = memory_status();
    prism::serving::MetricsRegistry metrics;
    prism::serving::EngineFactories factories;
    gen::register_generate_engine(factories);
    auto kind = factories.find("chat");
    if (!kind.has_value()) {
      std::fprintf(stderr, "generate_bench: %s\n", kind.status().to_string().c_str());
      return 1;
    }
    prism::serving::DeploymentConfig c;
    c.name = "bench";
    c.task = "chat";
    c.model = o.model;
    c.precision = o.precision;
    c.timeout_ms = 0;
    int max_streams = 1;
    for (int n : o.streams) max_streams = std::max(max_streams, n);
    c.batching.max_batch_size = max_streams;
    c.knobs.set("max_model_len", o.max_model_len);
    c.knobs.set("prefix_caching", true);
    // Default budget: every stream's prompt and output plus two TTFT prompts, with room.
    int64_t kv_bytes = o.kv_cache_mib << 20;
    if (kv_bytes == 0) {
      auto cfg = prism::configs::LlamaConfig::load(o.model);
      if (!cfg.has_value()) {
        std::fprintf(stderr, "generate_bench: %s\n", cfg.status().to_string().c_str());
        return 1;
      }
      const prism::models::KvSpec spec{int(cfg->num_hidden_layers), int(cfg->num_key_value_heads), int(cfg->head_dim)};
      const int64_t tokens = std::max<int64_t>(int64_t(max_streams) * (o.stream_prompt + o.stream_tokens + 16),
                                               std::min(o.max_model_len, cfg->max_context())) +
                             2 * o.ttft_prompt;
      kv_bytes = tokens * 5 / 4 / 16 * gen::kv_bytes_per_block(spec, 16, kv_dtype);
    }
    c.knobs.set("kv_cache_bytes", kv_bytes);
    if (const prism::Status s = c.validate(); !s.ok()) {
      std::fprintf(stderr, "generate_bench: %s\n", s.to_string().c_str());
      return 1;
    }
    auto dep = std::make_unique<prism::serving::Deployment>(c, *kind, metrics);
    const auto t0 = Clock::now();
    dep->start();
    if (const prism::Status s = dep->wait_ready(); !s.ok()) {
      std::fprintf(stderr, "generate_bench: %s\n", s.to_string().c_str());
      return 1;
    }
    const double load_s = seconds_since(t0);
    const MemoryStatus loaded = memory_status();
    const nlohmann::json info = dep->info().engine;
    const int64_t weight_bytes = info.value("weight_bytes", int64_t{0});
    const int64_t kv_cache_bytes = info.value("kv_cache_bytes", int64_t{0});
    vocab = info.value("vocab_size", int64_t{0});
    std::printf("deployment ready in %.1f s: weights %.1f MiB, KV %.1f MiB (%lld tokens, %s)\n", load_s,
                mib(weight_bytes), mib(kv_cache_bytes), static_cast<long long>(info.value("kv_token_capacity", 0)),
                info.value("kv_cache_dtype", std::string("?")).c_str());

    // RSS right after each workload (VmHWM would count the bandwidth probe's buffer).
    int64_t peak_rss = loaded.rss;
    if (o.modes.count("ttft")) {
      run_ttft(*dep, o, vocab, rng, ef);
      peak_rss = std::max(peak_rss, memory_status().rss);
    }
    if (o.modes.count("streams")) {
      const double gbs = prism::bench::measure_read_bandwidth_gbs();
      // The deployment's decoder is the engine's; its KV geometry is read from a second load
      // only in the model modes, so the KV share here comes from the engine's description.
      const int64_t kv_token = info.value("kv_token_capacity", int64_t{1}) > 0
                                   ? kv_cache_bytes / std::max<int64_t>(1, info.value("kv_token_capacity", int64_t{1}))
                                   : 0;
      run_streams(*dep, o, vocab, rng, gbs, weight_bytes, kv_token, ef, peak_rss);
    }
    if (o.modes.count("memory")) {
      const MemoryStatus after = memory_status();
      peak_rss = std::max(peak_rss, after.rss);
      // Resident weights: what a step streams plus the embedding table and norms (a tied LM
      // head keeps the table beside its packed copy).
      const int64_t resident = info.value("resident_weight_bytes", weight_bytes);
      const int64_t bound = resident + kv_cache_bytes;
      std::printf("\nmemory: RSS before the deployment %.1f MiB, after load %.1f MiB, after the workloads %.1f MiB "
                  "(anon %.1f, file-backed %.1f), highest after a workload %.1f MiB\n",
                  mib(base.rss), mib(loaded.rss), mib(after.rss), mib(after.anon), mib(after.file), mib(peak_rss));
      std::printf("        resident weights %.1f MiB (%.1f streamed per step) + KV budget %.1f MiB = %.1f MiB; "
                  "RSS growth %.1f MiB = %.0f%% of it (overhead beyond it %+.1f MiB)\n",
                  mib(resident), mib(weight_bytes), mib(kv_cache_bytes), mib(bound), mib(peak_rss - base.rss),
                  100.0 * double(peak_rss - base.rss) / double(std::max<int64_t>(1, bound)),
                  mib(peak_rss - base.rss - bound));
    }
    dep->stop();
  }

  // ---- model modes: the decoder alone ----
  if (o.modes.count("precisions")) run_precisions(o, rng);
  const bool model_modes = o.modes.count("decode") || o.modes.count("prefill") || o.modes.count("kv") ||
                           o.modes.count("peer");
  if (!model_modes) return 0;
  auto loaded = prism::models::load_llama(o.model, *precision);
  if (!loaded.has_value()) {
    std::fprintf(stderr, "generate_bench: %s\n", loaded.status().to_string().c_str());
    return 1;
  }
  prism::models::Decoder& m = **loaded;
  vocab = m.vocab_size();
  const std::vector<int32_t> decode_prompt = random_tokens(o.decode_context, vocab, rng);
  DecodeFigure df;
  double prefill_512 = 0, prefill_long = 0, gflops_512 = 0, gflops_long = 0, peak = 0, gbs = 0;
  if (o.modes.count("decode") || o.modes.count("peer")) {
    model_decode(m, std::vector<int32_t>(decode_prompt.begin(), decode_prompt.begin() + 8), 2, kv_dtype, 1.0);  // warm-up
    gbs = prism::bench::measure_read_bandwidth_gbs();
    df = model_decode(m, decode_prompt, o.decode_tokens, kv_dtype, gbs);
    const double gbs_after = prism::bench::measure_read_bandwidth_gbs();
    std::printf("\nmodel decode at batch 1 (context %d..%d): %.2f tokens/s (median step; mean %.2f) = %.0f%% of the "
                "roofline %.2f tokens/s (weights %.0f MiB + KV; read %.1f GB/s before, %.1f after; achieved %.1f GB/s)\n",
                o.decode_context, o.decode_context + o.decode_tokens, df.tokens_per_s, df.mean_tokens_per_s,
                100.0 * df.tokens_per_s / df.roofline_tokens_per_s, df.roofline_tokens_per_s, mib(m.weight_bytes()),
                gbs, gbs_after, df.gbs);
  }
  if (o.modes.count("prefill") || o.modes.count("peer")) {
    model_prefill(m, 64, kv_dtype, rng);  // warm-up
    const prism::Result<double> peak_r = prism::measure_gemm_peak(*precision);
    peak = peak_r.has_value() ? *peak_r : 0.0;
    std::tie(prefill_512, gflops_512) = model_prefill(m, 512, kv_dtype, rng);
    std::tie(prefill_long, gflops_long) = model_prefill(m, o.ttft_prompt, kv_dtype, rng);
    std::printf("\nmodel prefill: 512 tokens %.1f tokens/s (%.0f GFLOP/s = %.0f%% of the %s GEMM peak %.0f GFLOP/s); "
                "%d tokens %.1f tokens/s (%.0f GFLOP/s = %.0f%%)\n",
                prefill_512, gflops_512, peak > 0 ? 100.0 * gflops_512 / peak : 0.0, o.precision.c_str(), peak,
                o.ttft_prompt, prefill_long, gflops_long, peak > 0 ? 100.0 * gflops_long / peak : 0.0);
  }
  if (o.modes.count("kv")) run_kv_mode(m, o, rng);

  if (o.modes.count("peer")) {
    const int greedy_tokens = 16;
    const PeerFigures p = run_peer(o, decode_prompt, greedy_tokens);
    if (!p.ok) {
      std::fprintf(stderr, "generate_bench: the PyTorch peer failed\n");
      return 1;
    }
    std::printf("\nagainst the PyTorch peer (%s weights, same checkpoint, %d threads; ratios > 1: Prism faster)\n",
                o.precision == "f32" ? "f32" : "bf16", prism::num_threads());
    std::printf("%-34s %12s %12s %8s\n", "", "prism", "peer", "ratio");
    std::printf("%-34s %12.2f %12.2f %7.2fx\n", "decode tokens/s, batch 1", df.tokens_per_s, p.decode_tokens_per_s,
                df.tokens_per_s / p.decode_tokens_per_s);
    if (ef.decode_tokens_per_s > 0)
      std::printf("%-34s %12.2f %12.2f %7.2fx\n", "  (engine, batch 1)", ef.decode_tokens_per_s, p.decode_tokens_per_s,
                  ef.decode_tokens_per_s / p.decode_tokens_per_s);
    std::printf("%-34s %12.1f %12.1f %7.2fx\n", "prefill tokens/s, 512", prefill_512, p.prefill_512,
                prefill_512 / p.prefill_512);
    const std::string long_name = "prefill tokens/s, " + std::to_string(o.ttft_prompt);
    std::printf("%-34s %12.1f %12.1f %7.2fx\n", long_name.c_str(), prefill_long, p.prefill_2048,
                prefill_long / p.prefill_2048);
    if (ef.ttft_cold_s > 0)
      std::printf("%-34s %12.3f %12.3f %7.2fx\n", "TTFT s, cold (peer: its prefill)", ef.ttft_cold_s,
                  o.ttft_prompt / p.prefill_2048, (o.ttft_prompt / p.prefill_2048) / ef.ttft_cold_s);
    if (ef.ttft_warm_s > 0)
      std::printf("%-34s %12.3f %12.3f %7.2fx\n", "TTFT s, cached prefix (peer: none)", ef.ttft_warm_s,
                  o.ttft_prompt / p.prefill_2048, (o.ttft_prompt / p.prefill_2048) / ef.ttft_warm_s);
    const int compared = int(std::min(p.greedy.size(), df.greedy.size()));
    int same = 0;
    while (same < compared && p.greedy[size_t(same)] == df.greedy[size_t(same)]) ++same;
    double max_diff = 0, max_ref = 0;
    const bool comparable = !p.prompt_logits.empty() && p.prompt_logits.size() == df.prompt_logits.size();
    for (size_t i = 0; comparable && i < p.prompt_logits.size(); ++i) {
      max_diff = std::max(max_diff, double(std::fabs(p.prompt_logits[i] - df.prompt_logits[i])));
      max_ref = std::max(max_ref, double(std::fabs(p.prompt_logits[i])));
    }
    std::printf("same weights check: next-token logits after the %d-token prompt differ by %.2e of their largest "
                "(%s arithmetic on both sides); the first %d of %d greedy tokens agree\n",
                o.decode_context, comparable ? max_diff / std::max(max_ref, 1e-30) : -1.0,
                o.precision == "f32" ? "f32" : "bf16", same, compared);
  }
  return 0;
}
