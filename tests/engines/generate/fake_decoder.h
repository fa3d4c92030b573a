// What the engines/generate tests share: a fake models::Decoder that really uses the paged KV
// cache the engine hands it (it writes each token's id into its K slot and its position into
// its V slot, then reads every logits row's whole context back through the block table), so
// a wrong block table, slot, position, chunk boundary or prefix-cache hit changes the output;
// its logits peak on a known function of that context. A row given by input_embeddings (token
// id -1: a media row) is cached as -media_row_code(row), so the context, and the output,
// depend on the exact rows the engine spliced in. As an encoder-decoder decoder (Options::cross)
// it reads batch.cross: each sequence's context starts with the marker of the memory it was
// given, so a sequence handed another request's audio (or none) produces other tokens. A fake
// models::SpeechEncoder makes those memories (the marker: a hash of the segment's features).
// Also a gate that holds forward calls, a log of what the decoder computed, and a writer of
// small model directories (config.json + the real GPT-2 tokenizer from ../shared/testdata).
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
#include "models/speech_encoder.h"
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

// The marker a FakeSpeechEncoder gives a segment: a hash of its features in [1, 2^20] (every
// value of its memory), and what a cross-reading FakeDecoder puts first in the context.
inline int32_t cross_marker(std::span<const float> segment_features) { return media_row_code(segment_features); }
inline int32_t cross_context_code(int32_t marker) { return -(int32_t(1) << 21) - marker; }

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
    // Encoder-decoder: every forward needs batch.cross[s] for each sequence s (a
    // FakeSpeechEncoder memory); its marker leads the sequence's context.
    bool cross = false;
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
    std::vector<int32_t> markers;  // per sequence
    if (o_.cross) {
      if (int64_t(b.cross.size()) != S) throw std::runtime_error("fake decoder: batch.cross is not one per sequence");
      for (const models::CrossKv* c : b.cross) {
        if (c == nullptr || c->k.empty() || c->k.size() != c->v.size() || c->k[0].size(0) != c->frames)
          throw std::runtime_error("fake decoder: a sequence without a well-formed cross-attention memory");
        const float marker = c->k[0].data<float>()[0];
        for (size_t l = 0; l < c->k.size(); ++l)
          for (const Tensor* t : {&c->k[l], &c->v[l]})
            for (int64_t i = 0; i < t->numel(); ++i)
              if (t->data<float>()[i] != marker) throw std::runtime_error("fake decoder: a corrupt cross memory");
        markers.push_back(int32_t(marker));
      }
    }
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
      if (o_.cross) context.push_back(cross_context_code(markers[size_t(s)]));
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

// What a FakeSpeechEncoder encoded, shared with the test thread.
struct SpeechEncodeLog {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> segments{0};
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> call_shapes;  // (segments, frames) of each call, in order
};

// A speech encoder whose memory of a segment holds its marker (cross_marker of its features)
// in every value: [frames / 2, 1, 1] per layer, drawn from the caller's arena when one is
// active (as real activations are). Throws on a segment whose first value is `poison`.
class FakeSpeechEncoder final : public models::SpeechEncoder {
 public:
  struct Options {
    int64_t num_mel_bins = 80;
    int64_t input_frames = 20;
    int num_layers = 2;
    std::shared_ptr<SpeechEncodeLog> log;
    float poison = 0.0f;  // != 0: a segment starting with this value fails the call
  };
  explicit FakeSpeechEncoder(Options o) : o_(std::move(o)) {}

  std::vector<std::shared_ptr<const models::CrossKv>> encode(const Tensor& features) const override {
    if (features.dim() != 3 || features.size(1) != o_.num_mel_bins)
      throw std::runtime_error("fake speech encoder: features are not [B, mels, F]");
    const int64_t B = features.size(0), F = features.size(2);
    if (F % 2 != 0 || F > o_.input_frames) throw std::runtime_error("fake speech encoder: bad frame count");
    const int64_t per = o_.num_mel_bins * F;
    std::vector<std::shared_ptr<const models::CrossKv>> out;
    for (int64_t b = 0; b < B; ++b) {
      const std::span<const float> segment(features.data<float>() + b * per, size_t(per));
      if (o_.poison != 0.0f && segment[0] == o_.poison)
        throw std::runtime_error("fake speech encoder: poisoned segment");
      const float marker = float(cross_marker(segment));
      auto c = std::make_shared<models::CrossKv>();
      c->frames = F / 2;
      for (int l = 0; l < o_.num_layers; ++l) {
        for (std::vector<Tensor>* kv : {&c->k, &c->v}) {
          Tensor t = Tensor::empty({F / 2, 1, 1}, DType::f32);
          std::fill(t.data<float>(), t.data<float>() + t.numel(), marker);
          kv->push_back(t);
        }
      }
      out.push_back(std::move(c));
    }
    if (o_.log) {
      ++o_.log->calls;
      o_.log->segments += B;
      std::lock_guard lock(o_.log->mu);
      o_.log->call_shapes.emplace_back(B, F);
    }
    return out;
  }
  int64_t num_mel_bins() const override { return o_.num_mel_bins; }
  int64_t input_frames() const override { return o_.input_frames; }
  int64_t output_frames() const override { return o_.input_frames / 2; }
  double flops_per_segment() const override { return 1000.0; }

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
