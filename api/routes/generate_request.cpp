// api/routes/generate_request.cpp: the sampling fields of the generate routes.
#include "api/routes/generate_request.h"

#include <limits>
#include <utility>

#include "api/routes/deployment_call.h"

namespace prism::api {

namespace {


template <class T>
std::optional<T> optional_of(JsonFields& f, std::string_view field, T value) {
  if (!f.ok() || !f.has(field)) return std::nullopt;
  return value;
}

std::optional<double> read_number(JsonFields& f, std::string_view field, double lo, double hi) {
  const double x = f.optional_number(field, 0.0, lo, hi);
  return optional_of(f, field, x);
}

// OpenAI's `stop`: null, a string, or an array of at most four non-empty strings.
std::vector<std::string> read_stop(JsonFields& f) {
  if (!f.ok() || !f.has("stop")) return {};
  const nlohmann::json& v = f.json()["stop"];
  if (v.is_array() && v.empty()) return {};  // the SDKs send [] for "no stop strings"
  std::vector<std::string> stop = f.required_strings("stop");
  if (!f.ok()) return {};
  if (stop.size() > static_cast<size_t>(kMaxStopStrings)) {
    f.fail("stop", "at most " + std::to_string(kMaxStopStrings) + " stop strings are allowed; got " +
                       std::to_string(stop.size()) + ".");
    return {};
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) {
      f.fail(v.is_string() ? std::string("stop") : "stop[" + std::to_string(i) + "]",
             "a stop string must not be empty.");
      return {};
    }
  }
  return stop;
}

// vLLM's `stop_token_ids`: an array of integers (the vocabulary check comes later).
std::vector<int64_t> read_stop_token_ids(JsonFields& f) {
  if (!f.ok() || !f.has("stop_token_ids")) return {};
  const nlohmann::json& v = f.json()["stop_token_ids"];
  if (!v.is_array()) {
    f.fail("stop_token_ids", std::string("expected an array of token ids, got ") + json_type_name(v) + ".");
    return {};
  }
  if (v.size() > static_cast<size_t>(kMaxStopTokenIds)) {
    f.fail("stop_token_ids", "at most " + std::to_string(kMaxStopTokenIds) + " token ids are allowed.");
    return {};
  }
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || (v[i].is_number_unsigned() && v[i].get<uint64_t>() > INT64_MAX)) {
      f.fail("stop_token_ids[" + std::to_string(i) + "]",
             std::string("expected an integer token id, got ") + json_type_name(v[i]) + ".");
      return {};
    }
    ids.push_back(v[i].get<int64_t>());
  }
  return ids;
}

// `seed`: any JSON integer; OpenAI's SDKs send int64, some clients unsigned 64-bit values.
std::optional<uint64_t> read_seed(JsonFields& f) {
  if (!f.ok() || !f.has("seed")) return std::nullopt;
  const nlohmann::json& v = f.json()["seed"];
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) return static_cast<uint64_t>(v.get<int64_t>());  // NOTE: wraps: -1 is a seed too
  f.fail("seed", std::string("expected an integer, got ") + json_type_name(v) + ".");
  return std::nullopt;
}

void read_stream(JsonFields& f, GenerateFields& out) {
  out.stream = f.optional_bool("stream", false);
  if (!f.ok() || !f.has("stream_options")) return;
  if (!out.stream) {
    f.fail("stream_options", "only allowed when stream is true.");
    return;
  }
  const nlohmann::json& options = f.json()["stream_options"];
  if (!options.is_object()) {
    f.fail("stream_options", std::string("expected an object, got ") + json_type_name(options) + ".");
    return;
  }
  // NOTE: vLLM's continuous_usage_stats is ignored like any unknown field: usage comes once, at the end.
  if (auto it = options.find("include_usage"); it != options.end() && !it->is_null()) {
    if (!it->is_boolean())
      return f.fail("stream_options.include_usage",
                    std::string("expected a boolean, got ") + json_type_name(*it) + ".");
    out.include_usage = it->get<bool>();
  }
}

void read_logprobs(JsonFields& f, GenerateApi api, GenerateFields& out) {
  if (api == GenerateApi::completions) {  // legacy: an integer, the number of alternatives
    const int64_t k = f.optional_int("logprobs", -1, 0, kMaxLegacyLogprobs);
    if (f.ok() && f.has("logprobs")) {
      out.logprobs = true;
      out.top_logprobs = static_cast<int>(k);
    }
    return;
  }
  out.logprobs = f.optional_bool("logprobs", false);
  out.top_logprobs = static_cast<int>(f.optional_int("top_logprobs", 0, 0, kMaxTopLogprobs));
  if (f.ok() && f.has("top_logprobs") && !out.logprobs) f.fail("top_logprobs", "requires logprobs to be true.");
}

void read_max_tokens(JsonFields& f, GenerateApi api, GenerateFields& out) {
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  const int64_t max_tokens = f.optional_int("max_tokens", 0, 1, kMax);
  out.max_tokens = optional_of(f, "max_tokens", max_tokens);
  if (api == GenerateApi::chat) {  // the newer name wins when both are sent
    const int64_t completion = f.optional_int("max_completion_tokens", 0, 1, kMax);
    if (f.ok() && f.has("max_completion_tokens")) out.max_tokens = completion;
  } else if (!out.max_tokens) {
    out.max_tokens = kDefaultCompletionsMaxTokens;
  }
  out.min_tokens = f.optional_int("min_tokens", 0, 0, kMax);
}

}  // namespace

GenerateFields read_generate_fields(JsonFields& f, GenerateApi api) {
  GenerateFields out;
  out.temperature = read_number(f, "temperature", 0.0, 2.0);
  out.top_p = read_number(f, "top_p", 0.0, 1.0);
  if (f.ok() && out.top_p && *out.top_p <= 0.0) f.fail("top_p", "must be greater than 0 and at most 1.");
  const int64_t top_k = f.optional_int("top_k", 0, -1);
  if (f.ok() && f.has("top_k")) out.top_k = top_k < 0 ? 0 : top_k;
  out.min_p = read_number(f, "min_p", 0.0, 1.0);
  out.repetition_penalty = read_number(f, "repetition_penalty", 0.0, 2.0);
  if (f.ok() && out.repetition_penalty && *out.repetition_penalty <= 0.0)
    f.fail("repetition_penalty", "must be greater than 0 and at most 2.");
  out.frequency_penalty = read_number(f, "frequency_penalty", -2.0, 2.0);
  out.presence_penalty = read_number(f, "presence_penalty", -2.0, 2.0);
  out.seed = read_seed(f);
  read_max_tokens(f, api, out);
  out.stop = read_stop(f);
  out.stop_token_ids = read_stop_token_ids(f);
  out.ignore_eos = f.optional_bool("ignore_eos", false);
  read_logprobs(f, api, out);
  out.n = static_cast<int>(f.optional_int("n", 1, 1, kMaxChoices));
  read_stream(f, out);
  (void)f.optional_string("user");  // accepted, as OpenAI does; Prism keeps no per-user state
  out.lane = read_priority(f);
  if (f.ok() && f.has("logit_bias")) {
    const nlohmann::json& bias = f.json()["logit_bias"];
    if (!bias.is_object() || !bias.empty()) f.fail("logit_bias", "is not supported by Prism.");
  }
  return out;
}

Result<frontends::SamplingParams> to_sampling_params(const GenerateFields& fields, const frontends::SamplingParams& defaults,
                                               int max_tokens, std::vector<int32_t> stop_token_ids) {
  if (fields.min_tokens > max_tokens)
    return invalid_argument("min_tokens (" + std::to_string(fields.min_tokens) + ") is more than max_tokens (" +
                            std::to_string(max_tokens) + ").");
  frontends::SamplingParams p = defaults;
  if (fields.temperature) p.temperature = static_cast<float>(*fields.temperature);
  if (fields.top_p) p.top_p = static_cast<float>(*fields.top_p);
  if (fields.top_k) p.top_k = static_cast<int>(std::min<int64_t>(*fields.top_k, std::numeric_limits<int>::max()));
  if (fields.min_p) p.min_p = static_cast<float>(*fields.min_p);
  if (fields.repetition_penalty) p.repetition_penalty = static_cast<float>(*fields.repetition_penalty);
  if (fields.frequency_penalty) p.frequency_penalty = static_cast<float>(*fields.frequency_penalty);
  if (fields.presence_penalty) p.presence_penalty = static_cast<float>(*fields.presence_penalty);
  p.seed = fields.seed;
  p.max_tokens = max_tokens;
  p.min_tokens = static_cast<int>(fields.min_tokens);
  p.stop = fields.stop;
  p.stop_token_ids = std::move(stop_token_ids);
  p.ignore_eos = fields.ignore_eos;
  p.logprobs = fields.logprobs;
  p.top_logprobs = fields.top_logprobs;
  p.n = fields.n;
  return p;
}

}  // namespace prism::api
