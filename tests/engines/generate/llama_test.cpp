// The generate engine over a real tiny Llama (tests/reference/llama_family.py, llama2 and
// qwen2 layouts) inside a serving::Deployment: the reference's 32-token greedy continuations
// of its three prompts come out of the engine exactly, served concurrently, with chunked
// prefill, through a pool small enough to preempt, with and without n-gram speculation
// (greedy output identical), and from a prefix-cache hit. int8 and bf16 KV caches serve
// too (their agreement with f32 is reported, not asserted to be exact).
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <sstream>

#include "engines/generate/generate_engine_factory.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "models/llama/llama.h"
#include "serving/deployment.h"
#include "test_util/paths.h"
#include "test_util/reference_io.h"

namespace prism::engines::generate {
namespace {

namespace fs = std::filesystem;
using serving::Deployment;
using serving::DeploymentConfig;
using serving::RequestPtr;

constexpr int kGenerated = 32;

struct Reference {
  std::string model_dir;  // config.json + weights + a tokenizer.json for the frontend
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> generated;
};

Result<Reference> load_reference(const std::string& layout) {
  PRISM_ASSIGN_OR_RETURN(std::string dir, test::generate_reference("llama_family.py", "llama_family_" + layout,
                                                                   "--layout " + layout));
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  PRISM_ASSIGN_OR_RETURN(Tensor ids, file->get("token_ids"));
  PRISM_ASSIGN_OR_RETURN(Tensor cu, file->get("cu_seqlens"));
  PRISM_ASSIGN_OR_RETURN(Tensor gen, file->get("generated"));
  Reference r;
  const Tensor ids32 = ids.to(DType::i32), cu32 = cu.to(DType::i32), gen32 = gen.to(DType::i32).contiguous();
  for (int64_t s = 0; s + 1 < cu32.size(0); ++s) {
    const int32_t* c = cu32.data<int32_t>();
    r.prompts.emplace_back(ids32.data<int32_t>() + c[s], ids32.data<int32_t>() + c[s + 1]);
    r.generated.emplace_back(gen32.data<int32_t>() + s * gen32.size(1),
                             gen32.data<int32_t>() + s * gen32.size(1) + kGenerated);
  }
  // The generator writes no tokenizer; the frontend needs one (GPT-2's decodes the tiny ids).
  r.model_dir = test::scratch_dir("gen_llama_" + layout);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "reference.safetensors")
      fs::copy_file(e.path(), fs::path(r.model_dir) / e.path().filename(), fs::copy_options::overwrite_existing);
  fs::copy_file(test::testdata_dir() + "/tokenizers/gpt2/tokenizer.json", r.model_dir + "/tokenizer.json",
                fs::copy_options::overwrite_existing);
  return r;
}

struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  frontends::GenerateOutput out;
  bool wait() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(120), [&] { return done; });
  }
};

struct LlamaDeployment {
  LlamaDeployment(const std::string& model_dir, serving::Knobs knobs, int max_batch_size = 8) {
    DeploymentConfig c;
    c.name = "llama";
    c.task = "chat";
    c.model = model_dir;
    c.precision = "f32";
    c.batching.max_batch_size = max_batch_size;
    c.knobs = std::move(knobs);
    DecoderLoader loader = [](const DeploymentConfig& config, ops::Precision p) {
      return models::load_llama(config.model, p);
    };
    d = std::make_unique<Deployment>(
        c, serving::EngineKind(generate_engine_factory(loader), generate_frontend_factory()), metrics);
    d->start();
    status = d->wait_ready();
  }
  ~LlamaDeployment() { d->stop(); }

  std::shared_ptr<Outcome> submit(const std::vector<int32_t>& prompt, int max_tokens) {
    auto o = std::make_shared<Outcome>();
    auto in = std::make_unique<frontends::GenerateInput>();
    in->prompt = prompt;
    in->sampling.temperature = 0.0f;
    in->sampling.max_tokens = max_tokens;
    in->sampling.ignore_eos = true;  // the reference continues through any id
    RequestPtr r = serving::make_request(std::move(in), [o](Result<serving::PayloadPtr> res) {
      std::lock_guard lock(o->mu);
      o->status = res.status();
      if (res.has_value())
        if (auto* g = dynamic_cast<frontends::GenerateOutput*>(res.value().get())) o->out = std::move(*g);
      o->done = true;
      o->cv.notify_all();
    });
    r->cost_tokens = int64_t(prompt.size());
    EXPECT_TRUE(d->submit(r).ok());
    return o;
  }
  double metric(const std::string& name) const {
    std::istringstream text(metrics.render());
    for (std::string line; std::getline(text, line);)
      if (line.starts_with(name + "{")) return std::stod(line.substr(line.rfind(' ') + 1));
    return -1;
  }

  serving::MetricsRegistry metrics;
  std::unique_ptr<Deployment> d;
  Status status;
};

serving::Knobs knobs(const std::string& speculation, int64_t kv_bytes, int64_t max_step_tokens,
                     const std::string& kv_dtype = "auto") {
  serving::Knobs k;
  k.set("max_model_len", int64_t(128));
  k.set("block_size", int64_t(16));
  k.set("kv_cache_bytes", kv_bytes);
  k.set("max_step_tokens", max_step_tokens);
  k.set("speculation", speculation);
  k.set("kv_cache_dtype", kv_dtype);
  return k;
}

// Serves the reference's three prompts at once; returns the outputs in prompt order.
std::vector<std::vector<int32_t>> serve_all(LlamaDeployment& dep, const Reference& ref) {
  std::vector<std::shared_ptr<Outcome>> outs;
  for (const auto& p : ref.prompts) outs.push_back(dep.submit(p, kGenerated));
  std::vector<std::vector<int32_t>> tokens;
  for (auto& o : outs) {
    EXPECT_TRUE(o->wait());
    EXPECT_TRUE(o->status.ok()) << o->status.to_string();
    tokens.push_back(o->out.choices.empty() ? std::vector<int32_t>{} : o->out.choices[0].tokens);
  }
  return tokens;
}

class GenerateLlama : public ::testing::TestWithParam<const char*> {};

TEST_P(GenerateLlama, GreedyOutputEqualsTheReferenceWithAndWithoutSpeculation) {
  auto ref = load_reference(GetParam());
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  // Per 16-token block: 2 layers × K, V × 16 × kv_heads × head_dim f32; 1 MiB is plenty.
  for (const char* spec : {"none", "ngram"}) {
    LlamaDeployment dep(ref->model_dir, knobs(spec, 1 << 20, 512));
    ASSERT_TRUE(dep.status.ok()) << dep.status.to_string();
    const auto out = serve_all(dep, *ref);
    for (size_t i = 0; i < ref->prompts.size(); ++i) EXPECT_EQ(out[i], ref->generated[i]) << spec << " prompt " << i;
    if (std::string(spec) == "ngram") {
      std::cout << "[ figures  ] " << GetParam() << " ngram drafts " << dep.metric("prism_spec_draft_tokens_total")
                << ", accepted " << dep.metric("prism_spec_accepted_tokens_total") << "\n";
    }
    // Again: the prompts now hit the prefix cache, and the output is the same.
    const auto again = serve_all(dep, *ref);
    for (size_t i = 0; i < ref->prompts.size(); ++i) EXPECT_EQ(again[i], ref->generated[i]) << spec << " cached " << i;
    EXPECT_GT(dep.metric("prism_prefix_cache_hit_tokens_total"), 0.0);
  }
}

TEST_P(GenerateLlama, ChunkedPrefillAndPreemptionKeepTheReferenceOutput) {
  auto ref = load_reference(GetParam());
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  LlamaDeployment probe(ref->model_dir, knobs("none", 1 << 20, 512));
  ASSERT_TRUE(probe.status.ok()) << probe.status.to_string();
  // The smallest pool the engine accepts: one 128-token sequence (8 blocks), so the three
  // sequences (37 + 32 tokens alone need 5 blocks) preempt each other; 7-token chunks.
  const int64_t block_bytes = probe.d->info().engine["kv_cache_bytes"].get<int64_t>() /
                              probe.d->info().engine["kv_blocks"].get<int64_t>();
  for (const char* spec : {"none", "ngram"}) {
    LlamaDeployment dep(ref->model_dir, knobs(spec, 8 * block_bytes, 7), /*max_batch_size=*/4);
    ASSERT_TRUE(dep.status.ok()) << dep.status.to_string();
    const auto out = serve_all(dep, *ref);
    for (size_t i = 0; i < ref->prompts.size(); ++i) EXPECT_EQ(out[i], ref->generated[i]) << spec << " prompt " << i;
    EXPECT_GT(dep.metric("prism_generate_preemptions_total"), 0.0) << spec;
  }
}

TEST_P(GenerateLlama, ReducedPrecisionKvCachesServe) {
  auto ref = load_reference(GetParam());
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  for (const char* dtype : {"bf16", "int8"}) {
    LlamaDeployment dep(ref->model_dir, knobs("none", 1 << 20, 512, dtype));
    ASSERT_TRUE(dep.status.ok()) << dep.status.to_string();
    EXPECT_EQ(dep.d->info().engine["kv_cache_dtype"], dtype == std::string("int8") ? "i8" : "bf16");
    const auto out = serve_all(dep, *ref);
    int64_t agree = 0, total = 0;
    for (size_t i = 0; i < ref->prompts.size(); ++i) {
      ASSERT_EQ(out[i].size(), size_t(kGenerated));
      // Tokens up to the first divergence (after it the contexts differ).
      size_t j = 0;
      while (j < out[i].size() && out[i][j] == ref->generated[i][j]) ++j;
      agree += int64_t(j);
      total += kGenerated;
    }
    std::cout << "[ figures  ] " << GetParam() << " kv " << dtype << ": greedy prefix agreement " << agree << "/"
              << total << "\n";
    EXPECT_GT(agree, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, GenerateLlama, ::testing::Values("llama2", "qwen2"));

}  // namespace
}  // namespace prism::engines::generate
