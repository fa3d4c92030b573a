// tools/loadgen/chat_workloads.cpp: chat requests, shared-prefix conversations, the stream meter.
#include "tools/loadgen/chat_workloads.h"

#include <optional>

#include "tools/loadgen/synthetic_text.h"

namespace prism::tools::loadgen {

namespace {

std::string string_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

class ChatStreamMeter final : public ResponseMeter {
 public:
  explicit ChatStreamMeter(Units expected) : expected_(std::move(expected)) {}

  void on_event(std::string_view data, double t_s) override {
    if (!malformed_.empty()) return;
    if (done_) {
      malformed_ = "an event came after data: [DONE]";
      return;
    }
    if (data == "[DONE]") {
      done_ = true;
      return;
    }
    nlohmann::json j = nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      malformed_ = "an event's data is not a JSON object";
      return;
    }
    if (auto e = j.find("error"); e != j.end()) {
      const std::string message = e->is_object() ? string_field(*e, "message") : std::string();
      malformed_ = "the stream carried an error" + (message.empty() ? std::string() : ": " + message);
      return;
    }
    if (auto choices = j.find("choices"); choices != j.end() && choices->is_array() && !choices->empty()) {
      const nlohmann::json& c = (*choices)[0];
      std::string text = string_field(c, "text");  // /v1/completions
      if (auto delta = c.find("delta"); delta != c.end() && delta->is_object())
        text += string_field(*delta, "content") + string_field(*delta, "reasoning_content");
      if (!text.empty()) {
        if (num_chunks_ == 0) first_s_ = t_s;
        else itl_s_.push_back(t_s - last_s_);
        last_s_ = t_s;
        ++num_chunks_;
      }
    }
    if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
      if (auto c = u->find("completion_tokens"); c != u->end() && c->is_number()) completion_tokens_ = c->get<double>();
      if (auto p = u->find("prompt_tokens"); p != u->end() && p->is_number()) prompt_tokens_ = p->get<double>();
    }
  }

  void on_body(std::string_view) override { not_streamed_ = true; }

  Measurement finish(double e2e_s) override {
    Measurement m;
    if (not_streamed_) m.malformed = "expected an event stream, got a plain body";
    else if (!malformed_.empty()) m.malformed = malformed_;
    else if (!done_) m.malformed = "the stream ended without data: [DONE]";
    if (!m.malformed.empty()) return m;
    const double output_tokens = completion_tokens_ ? *completion_tokens_ : static_cast<double>(num_chunks_);
    m.units["output_tokens"] = output_tokens;
    m.units["input_tokens"] = prompt_tokens_ ? *prompt_tokens_ : expected_["input_tokens"];
    if (num_chunks_ > 0) {
      m.latencies_s["ttft"].push_back(first_s_);
      if (!itl_s_.empty()) m.latencies_s["itl"] = std::move(itl_s_);
      if (output_tokens > 1) m.latencies_s["tpot"].push_back((e2e_s - first_s_) / (output_tokens - 1));
    }
    return m;
  }

 private:
  Units expected_;
  std::string malformed_;
  bool done_ = false, not_streamed_ = false;
  int64_t num_chunks_ = 0;
  double first_s_ = 0, last_s_ = 0;
  std::vector<double> itl_s_;
  std::optional<double> completion_tokens_, prompt_tokens_;
};

nlohmann::json message(const char* role, std::string content) {
  return {{"role", role}, {"content", std::move(content)}};
}

// The part of a chat request both workloads share.
BenchRequest chat_request(const WorkloadOptions& o, nlohmann::json messages, int64_t max_tokens, double input_words) {
  BenchRequest r;
  r.path = "/v1/chat/completions";
  r.streaming = true;
  nlohmann::json body = {{"model", o.model},
                         {"messages", std::move(messages)},
                         {"max_tokens", max_tokens},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (o.ignore_eos) body["ignore_eos"] = true;
  r.body = request_body(std::move(body), o);
  r.expected["input_tokens"] = input_words;
  r.expected["output_tokens"] = static_cast<double>(max_tokens);
  return r;
}

class ChatWorkload final : public Workload {
 public:
  explicit ChatWorkload(const WorkloadOptions& o) : o_(o) {
    if (!o_.input_tokens_set) o_.input_tokens = LengthDistribution::parse("128-1024", "").value();
    if (!o_.output_tokens_set) o_.output_tokens = LengthDistribution::parse("32-256", "").value();
  }
  std::string_view name() const override { return "chat"; }
  std::string_view task() const override { return "chat"; }
  std::string_view headline_unit() const override { return "output_tokens"; }

  BenchRequest make_request(uint64_t, Rng& rng) const override {
    const int64_t n = o_.input_tokens.sample(rng);
    const int64_t max_tokens = o_.output_tokens.sample(rng);
    return chat_request(o_, nlohmann::json::array({message("user", synthetic_text(rng, n))}), max_tokens,
                        static_cast<double>(n));
  }
  std::unique_ptr<ResponseMeter> make_meter(const BenchRequest& r) const override { return make_chat_meter(r.expected); }
  nlohmann::json describe() const override {
    nlohmann::json j = {{"workload", name()}, {"model", o_.model}, {"endpoint", "/v1/chat/completions"},
                        {"input_tokens", o_.input_tokens.spec()}, {"output_tokens", o_.output_tokens.spec()},
                        {"ignore_eos", o_.ignore_eos}};
    if (!o_.extra_body.empty()) j["extra_body"] = o_.extra_body;
    return j;
  }

 private:
  WorkloadOptions o_;
};

// NOTE: request i is turn (i / S) % T of conversation slot i % S (S sessions, T turns); a
// slot starts a new conversation after T turns. Turn t of a conversation resends its system
// prompt and the t earlier exchanges, which are drawn from the conversation's own stream, so
// every turn repeats the previous turn's prompt exactly and extends it: the prefix a cache can
// reuse. With S at least the concurrency, a turn is sent after the previous one answered.
class SharedPrefixWorkload final : public Workload {
 public:
  explicit SharedPrefixWorkload(const WorkloadOptions& o) : o_(o) {
    if (!o_.input_tokens_set) o_.input_tokens = LengthDistribution::parse("32-256", "").value();
    if (!o_.output_tokens_set) o_.output_tokens = LengthDistribution::parse("32-128", "").value();
    for (int64_t k = 0; k < o_.num_system_prompts; ++k) {
      Rng rng = Rng::derive(o_.seed, kSharedTextStream, Rng::splitmix64(static_cast<uint64_t>(k)));
      system_prompts_.push_back("You are assistant " + std::to_string(k) + ". " + synthetic_text(rng, o_.system_tokens));
    }
  }
  std::string_view name() const override { return "chat-shared-prefix"; }
  std::string_view task() const override { return "chat"; }
  std::string_view headline_unit() const override { return "output_tokens"; }

  BenchRequest make_request(uint64_t index, Rng& rng) const override {
    const uint64_t sessions = static_cast<uint64_t>(o_.num_sessions), turns = static_cast<uint64_t>(o_.num_turns);
    const uint64_t slot = index % sessions, round = index / sessions;
    const uint64_t turn = round % turns, conversation = (round / turns) * sessions + slot;
    const std::string& system = system_prompts_[conversation % system_prompts_.size()];
    nlohmann::json messages = nlohmann::json::array({message("system", system)});
    double words = static_cast<double>(o_.system_tokens);
    for (uint64_t t = 0; t <= turn; ++t) {
      // Each exchange has its own stream: the same text whenever the conversation resends it.
      Rng text_rng = Rng::derive(o_.seed, kSharedTextStream, Rng::splitmix64(conversation) ^ (t + 1) * 0x9e37ull);
      const int64_t n_user = o_.input_tokens.sample(text_rng);
      messages.push_back(message("user", synthetic_text(text_rng, n_user)));
      words += static_cast<double>(n_user);
      if (t == turn) break;
      const int64_t n_answer = o_.output_tokens.sample(text_rng);
      messages.push_back(message("assistant", synthetic_text(text_rng, n_answer)));
      words += static_cast<double>(n_answer);
    }
    return chat_request(o_, std::move(messages), o_.output_tokens.sample(rng), words);
  }
  std::unique_ptr<ResponseMeter> make_meter(const BenchRequest& r) const override { return make_chat_meter(r.expected); }
  nlohmann::json describe() const override {
    nlohmann::json j = {{"workload", name()}, {"model", o_.model}, {"endpoint", "/v1/chat/completions"},
                        {"system_tokens", o_.system_tokens}, {"system_prompts", o_.num_system_prompts},
                        {"sessions", o_.num_sessions}, {"turns", o_.num_turns},
                        {"user_tokens", o_.input_tokens.spec()}, {"output_tokens", o_.output_tokens.spec()},
                        {"ignore_eos", o_.ignore_eos}};
    if (!o_.extra_body.empty()) j["extra_body"] = o_.extra_body;
    return j;
  }

 private:
  WorkloadOptions o_;
  std::vector<std::string> system_prompts_;
};

}  // namespace

std::unique_ptr<ResponseMeter> make_chat_meter(Units expected) {
  return std::make_unique<ChatStreamMeter>(std::move(expected));
}

std::unique_ptr<Workload> make_chat(const WorkloadOptions& options) { return std::make_unique<ChatWorkload>(options); }

std::unique_ptr<Workload> make_chat_shared_prefix(const WorkloadOptions& options) {
  return std::make_unique<SharedPrefixWorkload>(options);
}

}  // namespace prism::tools::loadgen
