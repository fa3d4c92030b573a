// tools/loadgen/echo_workload.cpp: echo requests; the meter checks the answer is the input.
#include "tools/loadgen/echo_workload.h"

#include "tools/loadgen/synthetic_text.h"

namespace prism::tools::loadgen {

namespace {

class EchoMeter final : public ResponseMeter {
 public:
  EchoMeter(std::string input, Units expected) : input_(std::move(input)), expected_(std::move(expected)) {}
  void on_event(std::string_view, double) override { malformed_ = "an echo answer came as an event stream"; }
  void on_body(std::string_view body) override {
    nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("output")) malformed_ = "the answer has no 'output'";
    else if (j["output"] != input_) malformed_ = "the output is not the input";
  }
  Measurement finish(double) override {
    Measurement m;
    m.malformed = malformed_;
    if (m.malformed.empty()) m.units["input_tokens"] = expected_["input_tokens"];
    return m;
  }

 private:
  std::string input_;
  Units expected_;
  std::string malformed_;
};

class EchoWorkload final : public Workload {
 public:
  explicit EchoWorkload(const WorkloadOptions& o) : o_(o) {
    if (!o_.input_tokens_set) o_.input_tokens = LengthDistribution::parse("3-20", "").value();
  }
  std::string_view name() const override { return "echo"; }
  std::string_view task() const override { return "echo"; }
  std::string_view headline_unit() const override { return "requests"; }

  BenchRequest make_request(uint64_t, Rng& rng) const override {
    BenchRequest r;
    r.path = "/v1/prism/echo";
    const int64_t n = o_.input_tokens.sample(rng);
    r.body = request_body({{"model", o_.model}, {"input", synthetic_text(rng, n)}}, o_);
    r.expected["input_tokens"] = static_cast<double>(n);
    return r;
  }
  std::unique_ptr<ResponseMeter> make_meter(const BenchRequest& r) const override {
    // The input is read back from the body we sent: the meter compares the echo with it.
    nlohmann::json body = nlohmann::json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    return std::make_unique<EchoMeter>(body.is_object() ? body.value("input", "") : "", r.expected);
  }
  nlohmann::json describe() const override {
    return {{"workload", name()}, {"model", o_.model}, {"endpoint", "/v1/prism/echo"}, {"input_tokens", o_.input_tokens.spec()}};
  }

 private:
  WorkloadOptions o_;
};

}  // namespace

std::unique_ptr<Workload> make_echo(const WorkloadOptions& options) { return std::make_unique<EchoWorkload>(options); }

}  // namespace prism::tools::loadgen
