// tools/loadgen/embed_workloads.cpp: embedding requests and the meter that checks their answers.
#include "tools/loadgen/embed_workloads.h"

#include "tools/loadgen/synthetic_text.h"

namespace prism::tools::loadgen {

namespace {

// Reads {"data": [{"embedding": ...}, ...], "usage": {"prompt_tokens": N}}: one embedding per
// input, else the answer is malformed.
class EmbeddingMeter final : public ResponseMeter {
 public:
  explicit EmbeddingMeter(Units expected) : expected_(std::move(expected)) {}

  void on_event(std::string_view, double) override { streamed_ = true; }
  void on_body(std::string_view body) override {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      malformed_ = "the answer is not a JSON object";
      return;
    }
    const auto data = j.find("data");
    if (data == j.end() || !data->is_array()) {
      malformed_ = "the answer has no 'data' array";
      return;
    }
    for (const nlohmann::json& item : *data) {
      if (!item.is_object() || !item.contains("embedding")) {
        malformed_ = "an item of 'data' has no 'embedding'";
        return;
      }
    }
    num_embeddings_ = static_cast<double>(data->size());
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number()) prompt_tokens_ = p->get<double>();
    }
  }
  Measurement finish(double) override {
    Measurement m;
    const double docs = expected_["docs"];
    if (streamed_) m.malformed = "an embeddings answer came as an event stream";
    else if (!malformed_.empty()) m.malformed = malformed_;
    else if (num_embeddings_ != docs)
      m.malformed = "expected " + std::to_string(static_cast<int64_t>(docs)) + " embeddings, got " +
                    std::to_string(static_cast<int64_t>(num_embeddings_));
    if (!m.malformed.empty()) return m;
    m.units["docs"] = docs;
    m.units["input_tokens"] = prompt_tokens_ >= 0 ? prompt_tokens_ : expected_["input_tokens"];
    return m;
  }

 private:
  Units expected_;
  std::string malformed_;
  bool streamed_ = false;
  double num_embeddings_ = 0;
  double prompt_tokens_ = -1;  // -1: the server reported no usage
};

class EmbedWorkload final : public Workload {
 public:
  EmbedWorkload(const WorkloadOptions& o, bool bulk) : o_(o), bulk_(bulk) {
    // Online queries are short (a few words to about 20 tokens); bulk documents mix lengths
    // with a tail of long ones, as a corpus does: 510 words + [CLS] + [SEP] is 512 tokens,
    // the limit of BERT-family embedders.
    if (!bulk_ && !o_.input_tokens_set) o_.input_tokens = LengthDistribution::parse("3-20", "").value();
    if (bulk_ && !o_.doc_tokens_set) o_.doc_tokens = LengthDistribution::parse("16-256@95,510@5", "").value();
  }

  std::string_view name() const override { return bulk_ ? "embed-bulk" : "embed-online"; }
  std::string_view task() const override { return "embed"; }
  std::string_view headline_unit() const override { return bulk_ ? "docs" : "requests"; }

  BenchRequest make_request(uint64_t, Rng& rng) const override {
    BenchRequest r;
    r.path = "/v1/embeddings";
    nlohmann::json body = {{"model", o_.model}};
    double tokens = 0;
    if (bulk_) {
      nlohmann::json docs = nlohmann::json::array();
      for (int64_t i = 0; i < o_.docs_per_request; ++i) {
        const int64_t n = o_.doc_tokens.sample(rng);
        docs.push_back(synthetic_text(rng, n));
        tokens += static_cast<double>(n);
      }
      body["input"] = std::move(docs);
      r.expected["docs"] = static_cast<double>(o_.docs_per_request);
    } else {
      const int64_t n = o_.input_tokens.sample(rng);
      body["input"] = synthetic_text(rng, n);
      tokens = static_cast<double>(n);
      r.expected["docs"] = 1;
    }
    r.expected["input_tokens"] = tokens;
    r.body = request_body(std::move(body), o_);
    return r;
  }

  std::unique_ptr<ResponseMeter> make_meter(const BenchRequest& request) const override {
    return std::make_unique<EmbeddingMeter>(request.expected);
  }

  nlohmann::json describe() const override {
    nlohmann::json j = {{"workload", name()}, {"model", o_.model}, {"endpoint", "/v1/embeddings"}};
    if (bulk_) {
      j["docs_per_request"] = o_.docs_per_request;
      j["doc_tokens"] = o_.doc_tokens.spec();
    } else {
      j["query_tokens"] = o_.input_tokens.spec();
    }
    if (!o_.extra_body.empty()) j["extra_body"] = o_.extra_body;
    return j;
  }

 private:
  WorkloadOptions o_;
  bool bulk_;
};

}  // namespace

std::unique_ptr<Workload> make_embed_online(const WorkloadOptions& options) {
  return std::make_unique<EmbedWorkload>(options, /*bulk=*/false);
}

std::unique_ptr<Workload> make_embed_bulk(const WorkloadOptions& options) {
  return std::make_unique<EmbedWorkload>(options, /*bulk=*/true);
}

}  // namespace prism::tools::loadgen
