// What the engines/generate tests share: a fake models::Decoder that really uses the paged KV
// cache the engine hands it (it writes each token's id into its K slot and its position into
// its V slot, then reads every logits row's whole context back through the block table), so
// a wrong block table, slot, position, chunk boundary or prefix-cache hit changes the output;
// its logits peak on a known function of that context. A row given by input_embeddings (token
// id -1: a media row) is cached as -media_row_code(row), so the context, and the output,
// depend on the exact rows the engine spliced in. Also a gate that holds forward calls,
// a log of what the decoder computed, and a writer of small model directories (config.json +
// the real GPT-2 tokenizer from ../shared/testdata).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/decoder.h"
#include "test_util/call_gate.h"
#include "test_util/paths.h"

namespace prism::test {

inline constexpr int64_t kFakeVocab = 50257;  // GPT-2's, so the real tokenizer decodes every id

// The next token after `context` (prompt + output so far). Depends on the whole context.
using NextTokenFn = std::function<int32_t(std::span<const int32_t> context)>;

// Default: a hash of the whole context mapped into ids 300..1299 (plain GPT-2 word pieces).
inline int32_t hashed_next_token(std::span<const int32_t> context) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : context) h = (h ^ uint64_t(uint32_t(t))) * 1099511628211ull;
  return int32_t(300 + (h >> 17) % 1000);
}

// Repetitive: follows the last token through a small cycle, perturbed by the context's sum
// (so it still reads the whole context); prompt lookup drafts often match it.
inline int32_t cyclic_next_token(std::span<const int32_t> context) {
  int64_t sum = 0;
  for (int32_t t : context) sum += t;
  const int32_t last = context.empty() ? 0 : context.back();
  return int32_t(400 + (int64_t(last) * 7 + (sum % 97 == 0 ? 1 : 0)) % 11);
}

// Greedy continuation of `prompt` by `next` (what the engine must produce), at most n tokens,
// stopping after a token in `stop_ids`.
inline std::vector<int32_t> expected_continuation(std::vector<int32_t> prompt, int n, const NextTokenFn& next,
                                                  const std::vector<int32_t>& stop_ids = {}) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = next(prompt);
    out.push_back(t);
    prompt.push_back(t);
    if (std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end()) break;
  }
  return out;
}

// What a media row becomes in the fake's context: a hash of its exact f32 bits in [1, 2^20]
// (cached negated, so it never equals a token id).
inline int32_t media_row_code(std::span<const float> row) {
  uint64_t h = 1469598103934665603ull;
  for (float x : row) {
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return int32_t(1 + (h >> 20) % (1u << 20));
}

// What the fake computed, shared with the test thread.
struct DecodeStats {
  std::atomic<int64_t> forwards{0};
  std::atomic<int64_t> tokens{0};        // rows computed (K/V written)
  std::atomic<int64_t> max_seqs{0};      // most sequences in one forward
  std::atomic<int64_t> max_tokens{0};    // most tokens in one forward
  std::atomic<int64_t> logits_rows{0};
  std::mutex mu;
  std::vector<std::vector<float>> media_rows;  // every input_embeddings row used, in computation order
};

class FakeDecoder final : public models::Decoder {
 public:
  struct Options {
    int64_t max_context = 256;
    int num_layers = 2;
    NextTokenFn next = hashed_next_token;
    std::shared_ptr<DecodeStats> stats;
    std::shared_ptr<CallGate> gate;
    int32_t poison_token = -1;  // a forward over this id (>= 0) throws (a failing model)
    int64_t vocab = kFakeVocab;
  };
  explicit FakeDecoder(Options o) : o_(std::move(o)) {
    if (!o_.next) o_.next = hashed_next_token;
  }

  Tensor forward(const models::DecoderBatch& b, std::span<const models::KvLayer> kv) override {
    if (o_.gate) o_.gate->pass();
    const int64_t T = b.token_ids.size(0), S = b.cu_seqlens_q.size(0) - 1;
    const int32_t* ids = b.token_ids.data<int32_t>();
    const int32_t* pos = b.positions.data<int32_t>();
    const int32_t* slots = b.slot_mapping.data<int32_t>();
    const int32_t* cu = b.cu_seqlens_q.data<int32_t>();
    const int32_t* ctx = b.context_lens.data<int32_t>();
    const int32_t* tables = b.block_tables.data<int32_t>();
    const int32_t* rows = b.logits_rows.data<int32_t>();
    const int64_t N = b.logits_rows.size(0), max_blocks = b.block_tables.size(1);
    for (int64_t t = 0; t < T; ++t)
      if (o_.poison_token >= 0 && ids[t] == o_.poison_token) throw std::runtime_error("fake decoder: poisoned token");
    if (int64_t(kv.size()) != o_.num_layers) throw std::runtime_error("fake decoder: wrong number of KV layers");
    // Token ids, or the codes of the media rows where the id is -1.
    std::vector<float> keys(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      keys[size_t(t)] = float(ids[t]);
      if (ids[t] >= 0) continue;
      if (ids[t] != -1 || !b.input_embeddings.defined() || b.input_embeddings.dim() != 2 ||
          b.input_embeddings.size(0) != T || b.input_embeddings.size(1) != hidden_size())
        throw std::runtime_error("fake decoder: token -1 without an input_embeddings row");
      const std::span<const float> row(b.input_embeddings.data<float>() + t * hidden_size(), size_t(hidden_size()));
      keys[size_t(t)] = -float(media_row_code(row));
      if (o_.stats) {
        std::lock_guard lock(o_.stats->mu);
        o_.stats->media_rows.emplace_back(row.begin(), row.end());
      }
    }
    const int64_t bs = kv[0].k.size(1), num_slots = kv[0].k.size(0) * bs;
    for (const models::KvLayer& l : kv) {
      float* k = l.k.data<float>();
      float* v = l.v.data<float>();
      for (int64_t t = 0; t < T; ++t) {
        if (slots[t] < 0) continue;
        if (slots[t] >= num_slots) throw std::runtime_error("fake decoder: slot out of range");
        k[slots[t]] = keys[size_t(t)];
        v[slots[t]] = float(pos[t]);
      }
    }
    const int64_t V = o_.vocab;
    Tensor logits = Tensor::zeros({N, V}, DType::f32);
    const float* k = kv.back().k.data<float>();
    const float* v = kv.back().v.data<float>();
    std::vector<int32_t> context;
    int64_t s = 0;
    for (int64_t r = 0; r < N; ++r) {
      while (s < S && cu[s + 1] <= rows[r]) ++s;
      if (s >= S) throw std::runtime_error("fake decoder: logits row past the batch");
      // The row's query is token (rows[r] - cu[s]) of the sequence's q_len; it sees every
      // cached token up to and including itself.
      const int64_t q_len = cu[s + 1] - cu[s];
      const int64_t visible = ctx[s] - (q_len - 1 - (rows[r] - cu[s]));
      context.clear();
      for (int64_t p = 0; p < visible; ++p) {
        const int64_t block = tables[s * max_blocks + p / bs];
        const int64_t slot = block * bs + p % bs;
        if (block < 0 || slot >= num_slots) throw std::runtime_error("fake decoder: block table out of range");
        if (int64_t(v[slot]) != p) throw std::runtime_error("fake decoder: cached position mismatch");
        context.push_back(int32_t(k[slot]));
      }
      // The next token at 10, and the id after it at 9 (what top_k = 2 sampling picks from).
      const int32_t next = o_.next(context);
      logits.data<float>()[r * V + next] = 10.0f;
      if (next + 1 < V) logits.data<float>()[r * V + next + 1] = 9.0f;
    }
    if (o_.stats) {
      ++o_.stats->forwards;
      o_.stats->tokens += T;
      o_.stats->logits_rows += N;
      int64_t m = o_.stats->max_seqs.load();
      while (S > m && !o_.stats->max_seqs.compare_exchange_weak(m, S)) {}
      m = o_.stats->max_tokens.load();
      while (T > m && !o_.stats->max_tokens.compare_exchange_weak(m, T)) {}
    }
    return logits;
  }
  Tensor embed(const Tensor& token_ids) const override {
    return Tensor::zeros({token_ids.size(0), hidden_size()}, DType::f32);
  }
  models::KvSpec kv_spec() const override { return {o_.num_layers, 1, 1}; }
  int64_t vocab_size() const override { return o_.vocab; }
  int64_t hidden_size() const override { return 8; }
  int64_t max_context() const override { return o_.max_context; }
  int64_t weight_bytes() const override { return 1000; }
  double flops(int64_t tokens, int64_t context) const override { return double(tokens) * 100.0; }

 private:
  Options o_;
};

// A model directory GenerateFrontend accepts: config.json (vocab 50257, eos 50256) and the
// real GPT-2 tokenizer.json.
inline std::string write_fake_generate_model(const std::string& name, int64_t max_positions = 256) {
  const std::string dir = scratch_dir(name);
  std::ofstream(dir + "/config.json") << "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", "
                                      << "\"vocab_size\": " << kFakeVocab
                                      << ", \"max_position_embeddings\": " << max_positions
                                      << ", \"eos_token_id\": 50256}\n";
  std::filesystem::copy_file(testdata_dir() + "/tokenizers/gpt2/tokenizer.json", dir + "/tokenizer.json");
  return dir;
}

}  // namespace prism::test
