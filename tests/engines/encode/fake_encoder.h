// What the engines/encode tests share: a fake models::Encoder whose hidden states are a known
// function of each token, its position and its sequence (so batching, padding, ordering and
// pooling mistakes change the numbers), a gate that holds encode calls so tests can build
// queue states deterministically, and a writer of small model directories (config.json, the
// real bert-uncased tokenizer from ../shared/testdata, weight bytes to hash).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <omp.h>

#include "models/encoder.h"
#include "test_util/call_gate.h"
#include "test_util/paths.h"

namespace prism::test {

// Hidden state [j] of token `id` at position `pos` of a sequence whose real token ids sum to
// `seq_sum`. Depends on the whole sequence (like attention), never on padding or other rows.
inline float fake_hidden(int32_t id, int64_t pos, int64_t seq_sum, int64_t j) {
  return float(std::sin(0.013 * double(id) * double(j + 1) + 0.31 * double(pos)) +
               0.001 * double(seq_sum % 101) * double(j + 1) / 8.0 + 0.05 * double(j % 3));
}

// Expected pooled vector (mean or cls) of one sequence, before truncation/normalisation.
inline std::vector<float> fake_pooled(const std::vector<int32_t>& ids, int64_t hidden, bool cls) {
  int64_t sum = 0;
  for (int32_t id : ids) sum += id;
  std::vector<double> acc(size_t(hidden), 0.0);
  const size_t n = cls ? 1 : ids.size();
  for (size_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < hidden; ++j) acc[size_t(j)] += fake_hidden(ids[t], int64_t(t), sum, j);
  std::vector<float> out(static_cast<size_t>(hidden));
  for (int64_t j = 0; j < hidden; ++j) out[size_t(j)] = float(acc[size_t(j)] / double(n));
  return out;
}

// Truncates to dims and, when asked, L2-normalises.
inline std::vector<float> finish_vector(std::vector<float> v, int64_t dims, bool normalize) {
  v.resize(size_t(dims));
  if (normalize) {
    double n = 0;
    for (float x : v) n += double(x) * x;
    n = std::max(std::sqrt(n), 1e-12);
    for (float& x : v) x = float(x / n);
  }
  return v;
}

// One encode call as the fake saw it.
struct EncodeCall {
  const void* encoder = nullptr;            // which instance (replica)
  std::vector<std::vector<int32_t>> seqs;   // real tokens of each sequence
  int64_t rows = 0;                         // rows computed (padding included)
  bool padded = false;
  int omp_threads = 0;                      // omp_get_max_threads() on the calling thread
};

// Thread-safe log of encode calls, shared by the fakes of a test.
struct EncodeLog {
  std::mutex mu;
  std::vector<EncodeCall> calls;
  void add(EncodeCall c) {
    std::lock_guard lock(mu);
    calls.push_back(std::move(c));
  }
  std::vector<EncodeCall> snapshot() {
    std::lock_guard lock(mu);
    return calls;
  }
};

class FakeEncoder final : public models::Encoder {
 public:
  FakeEncoder(int64_t hidden, int64_t max_tokens, std::shared_ptr<EncodeLog> log = nullptr,
              std::shared_ptr<CallGate> gate = nullptr)
      : hidden_(hidden), max_tokens_(max_tokens), log_(std::move(log)), gate_(std::move(gate)) {}

  Tensor encode(const models::EncoderBatch& batch) const override {
    if (gate_) gate_->pass();
    const int64_t rows = batch.token_ids.size(0);
    const int64_t num_seqs = batch.cu_seqlens.size(0) - 1;
    const int32_t* ids = batch.token_ids.data<int32_t>();
    const int32_t* cu = batch.cu_seqlens.data<int32_t>();
    Tensor h = Tensor::empty({rows, hidden_}, DType::f32);
    float* out = h.data<float>();
    EncodeCall call{this, {}, rows, batch.kv_lens.defined(), omp_get_max_threads()};
    for (int64_t s = 0; s < num_seqs; ++s) {
      const int64_t slot = cu[s + 1] - cu[s];
      const int64_t real = batch.kv_lens.defined() ? batch.kv_lens.data<int32_t>()[s] : slot;
      int64_t sum = 0;
      for (int64_t t = 0; t < real; ++t) sum += ids[cu[s] + t];
      for (int64_t t = 0; t < slot; ++t)
        for (int64_t j = 0; j < hidden_; ++j)
          out[(cu[s] + t) * hidden_ + j] = t < real ? fake_hidden(ids[cu[s] + t], t, sum, j) : 1000.0f;  // padding: junk
      call.seqs.emplace_back(ids + cu[s], ids + cu[s] + real);
    }
    if (log_) log_->add(std::move(call));
    return h;
  }
  int64_t hidden_size() const override { return hidden_; }
  int64_t max_tokens() const override { return max_tokens_; }
  double flops(int64_t length) const override { return 1000.0 * double(length) + double(length * length); }

 private:
  int64_t hidden_, max_tokens_;
  std::shared_ptr<EncodeLog> log_;
  std::shared_ptr<CallGate> gate_;
};

// A model directory the frontend accepts: config.json (BERT keys), the real bert-uncased
// tokenizer.json (vocabulary 30522), and `weight_bytes` as model.safetensors (the frontend
// only hashes it; fake encoders stand in for the model).
struct FakeModelDir {
  std::string model_type = "bert";
  int64_t hidden = 16;
  int64_t max_positions = 64;
  int64_t pad_token_id = 0;
  std::string extra_config;  // more JSON members, e.g. ", \"matryoshka_dimensions\": [8, 4]"
  std::string weight_bytes = "weights v1";

  std::string write(const std::string& name) const {
    namespace fs = std::filesystem;
    const std::string dir = scratch_dir(name);
    std::ofstream(dir + "/config.json") << "{\"architectures\": [\"BertModel\"], \"model_type\": \"" << model_type
                                        << "\", \"hidden_size\": " << hidden << ", \"vocab_size\": 30522"
                                        << ", \"max_position_embeddings\": " << max_positions
                                        << ", \"pad_token_id\": " << pad_token_id << extra_config << "}\n";
    fs::copy_file(testdata_dir() + "/tokenizers/bert-uncased/tokenizer.json", dir + "/tokenizer.json");
    std::ofstream(dir + "/model.safetensors", std::ios::binary) << weight_bytes;
    return dir;
  }
};

}  // namespace prism::test
