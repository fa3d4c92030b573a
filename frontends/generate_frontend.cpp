// frontends/generate_frontend.cpp: a generate deployment's tokenizer, chat template,
// context length, end-of-sequence ids and sampling defaults, read once from the model
// directory's small files (no weights). Knobs are the engine's to check, except
// max_model_len, which is read here because the api needs the context length, and a VLM's
// budget and media policy knobs, which its VisionProcessor reads. A VLM (config.json
// model_type "llava" / "idefics3") keeps its language model's fields under text_config; a
// Whisper model (model_type "whisper") has no chat template, its context is
// max_target_positions, and its SpeechProcessor reads the special tokens and logit rules.
#include "frontends/generate_frontend.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "base/file.h"
#include "base/log.h"
#include "configs/hf_config.h"
#include "configs/vlm_config.h"
#include "configs/whisper_config.h"
#include "text/pre_tokenizers.h"
#include "text/utf8.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Result<json> read_json_object(const fs::path& path) {
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

// A positive integer field; nullopt when absent or null.
Result<std::optional<int64_t>> optional_positive_int(const json& j, const char* key, const fs::path& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer() || it->get<int64_t>() < 1)
    return invalid_argument(origin.string() + ": \"" + key + "\" must be a positive integer");
  return std::optional<int64_t>(it->get<int64_t>());
}

// "eos_token_id": an integer, a list of integers, or null.
Status append_eos_ids(const json& j, const fs::path& origin, std::vector<int32_t>& ids) {
  const auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return {};
  auto add = [&](const json& v) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      return invalid_argument(origin.string() + ": \"eos_token_id\" must be a token id or a list of them");
    ids.push_back(int32_t(v.get<int64_t>()));
    return {};
  };
  if (it->is_array()) {
    for (const json& v : *it) PRISM_RETURN_IF_ERROR(add(v));
    return {};
  }
  return add(*it);
}

// The context length: max_position_embeddings, capped by a sliding window the model declares
// (full attention beyond it would not be the model's computation; qwen2 and qwen3 configs carry
// a sliding_window that applies only with use_sliding_window, as configs/llama_config reads it).
Result<int64_t> model_context(const json& config, const fs::path& origin) {
  PRISM_ASSIGN_OR_RETURN(std::optional<int64_t> positions, optional_positive_int(config, "max_position_embeddings", origin));
  if (!positions) return invalid_argument(origin.string() + ": no \"max_position_embeddings\"");
  int64_t context = *positions;
  const std::string type = config.value("model_type", "");
  const bool qwen = type == "qwen2" || type == "qwen3";
  const auto use = config.find("use_sliding_window");
  const bool window_applies = !qwen || (use != config.end() && use->is_boolean() && use->get<bool>());
  if (window_applies) {
    PRISM_ASSIGN_OR_RETURN(std::optional<int64_t> window, optional_positive_int(config, "sliding_window", origin));
    if (window) context = std::min(context, *window);
  }
  return context;
}

// generation_config.json: the model's own sampling defaults (do_sample false: greedy).
Result<SamplingParams> sampling_defaults(const fs::path& path) {
  SamplingParams defaults;
  PRISM_ASSIGN_OR_RETURN(json g, read_json_object(path));
  auto number = [&](const char* key, double lo, double hi, float& out) -> Status {
    const auto it = g.find(key);
    if (it == g.end() || it->is_null()) return {};
    if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi)
      return invalid_argument(path.string() + ": \"" + key + "\" must be a number in [" + std::to_string(lo) + ", " +
                              std::to_string(hi) + "]");
    out = float(it->get<double>());
    return {};
  };
  PRISM_RETURN_IF_ERROR(number("temperature", 0.0, 100.0, defaults.temperature));
  PRISM_RETURN_IF_ERROR(number("top_p", 0.0, 1.0, defaults.top_p));
  PRISM_RETURN_IF_ERROR(number("min_p", 0.0, 1.0, defaults.min_p));
  PRISM_RETURN_IF_ERROR(number("repetition_penalty", 0.01, 100.0, defaults.repetition_penalty));  // Qwen2.5: 1.05
  if (const auto it = g.find("top_k"); it != g.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX)
      return invalid_argument(path.string() + ": \"top_k\" must be a non-negative integer");
    defaults.top_k = int(it->get<int64_t>());
  }
  if (const auto it = g.find("do_sample"); it != g.end() && it->is_boolean() && !it->get<bool>())
    defaults.temperature = 0.0f;
  return defaults;
}

// The model families whose config.json describes a vision tower and a language model.
bool is_vision_language(const json& config) {
  const std::string type = config.value("model_type", "");
  return type == "llava" || type == "idefics3";
}

bool is_whisper(const json& config) { return config.value("model_type", "") == "whisper"; }

// A VLM's language-model fields: text_config's, the top level filling what it lacks (older
// llava-hf configs repeat vocab_size there; SmolVLM's eos lives at the top).
json language_model_config(const json& config) {
  const auto it = config.find("text_config");
  if (it == config.end() || !it->is_object()) return config;
  json lm = *it;
  for (const char* key : {"vocab_size", "max_position_embeddings", "eos_token_id"})
    if (!lm.contains(key) && config.contains(key)) lm[key] = config[key];
  // Keys at their transformers default are left out of a text_config (llava-1.5's has six):
  // the context length is then the text model's default.
  if (!lm.contains("max_position_embeddings")) {
    const std::string type = lm.value("model_type", "llama");
    if (type == "llama") lm["max_position_embeddings"] = 2048;
    else if (type == "mistral") lm["max_position_embeddings"] = 4096 * 32;
    else if (type == "qwen2") lm["max_position_embeddings"] = 32768;
  }
  return lm;
}

// A processor's own template (what processor.apply_chat_template renders, content parts
// included): chat_template.jinja, else chat_template.json's "chat_template".
struct TemplateFile {
  fs::path path;
  std::string source;
};
Result<std::optional<TemplateFile>> processor_template(const fs::path& dir) {
  std::error_code ec;
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::is_regular_file(jinja, ec)) {
    PRISM_ASSIGN_OR_RETURN(std::string source, read_file(jinja.string()));
    return std::optional<TemplateFile>(TemplateFile{jinja, std::move(source)});
  }
  const fs::path json_path = dir / "chat_template.json";
  if (!fs::is_regular_file(json_path, ec)) return std::optional<TemplateFile>();
  PRISM_ASSIGN_OR_RETURN(json j, read_json_object(json_path));
  const auto it = j.find("chat_template");
  if (it == j.end() || !it->is_string())
    return invalid_argument(json_path.string() + ": \"chat_template\" must be a string");
  return std::optional<TemplateFile>(TemplateFile{json_path, it->get<std::string>()});
}

// The chat template: tokenizer_config.json's, else the processor's (chat_template.jinja:
// newer transformers save it there; chat_template.json); a VLM's processor template comes
// first, since its tokenizer's may be text-only. Absent → nullopt.
Result<std::optional<text::ChatTemplate>> load_chat_template(const fs::path& dir, bool vision_language) {
  auto from_tokenizer_config = [&]() -> Result<std::optional<text::ChatTemplate>> {
    auto loaded = text::ChatTemplate::load(dir.string());
    if (loaded) return std::optional<text::ChatTemplate>(std::move(loaded).value());
    if (loaded.status().code() != StatusCode::not_found) return loaded.status();
    return std::optional<text::ChatTemplate>();
  };
  if (!vision_language) {
    PRISM_ASSIGN_OR_RETURN(std::optional<text::ChatTemplate> loaded, from_tokenizer_config());
    if (loaded) return loaded;
  }
  PRISM_ASSIGN_OR_RETURN(std::optional<TemplateFile> file, processor_template(dir));
  if (!file) return vision_language ? from_tokenizer_config() : std::optional<text::ChatTemplate>();
  // The special tokens the template may print come from tokenizer_config.json.
  std::string bos, eos;
  if (auto config = read_json_object(dir / "tokenizer_config.json")) {
    auto token = [&](const char* key) -> std::string {
      const auto it = config->find(key);
      if (it == config->end()) return {};
      if (it->is_string()) return it->get<std::string>();
      if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        return (*it)["content"].get<std::string>();
      return {};
    };
    bos = token("bos_token");
    eos = token("eos_token");
  }
  auto parsed = text::ChatTemplate::from_string(file->source, bos, eos);
  if (!parsed) return Status(parsed.status().code(), file->path.string() + ": " + parsed.status().message());
  return std::optional<text::ChatTemplate>(std::move(parsed).value());
}

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

}  // namespace

Result<std::shared_ptr<const GenerateFrontend>> GenerateFrontend::load(const serving::DeploymentConfig& config) {
  const fs::path dir(config.model);
  auto fe = std::make_shared<GenerateFrontend>();

  // NOTE: config.json is parsed once, here: the family configs the processors need
  // (configs::WhisperConfig, configs::VlmConfig) are read from this parse.
  const fs::path config_path = dir / "config.json";
  PRISM_ASSIGN_OR_RETURN(const configs::HfConfig hf, configs::HfConfig::load(dir.string()));
  const json& top_config = hf.object();
  const bool vision_language = is_vision_language(top_config);
  const bool speech = is_whisper(top_config);
  std::optional<configs::WhisperConfig> whisper;
  if (speech) {
    Result<configs::WhisperConfig> c = configs::WhisperConfig::from_hf(hf, config_path.string());
    if (!c) return invalid_argument(c.status().message());
    whisper = std::move(*c);
  }
  std::optional<configs::VlmConfig> vlm;
  if (vision_language) {
    PRISM_ASSIGN_OR_RETURN(vlm, VisionProcessor::read_config(hf));
  }
  const json model_config = vision_language ? language_model_config(top_config) : top_config;
  PRISM_ASSIGN_OR_RETURN(std::optional<int64_t> vocab, optional_positive_int(model_config, "vocab_size", config_path));
  if (!vocab) return invalid_argument(config_path.string() + ": no \"vocab_size\"");
  fe->vocab_size_ = *vocab;
  PRISM_ASSIGN_OR_RETURN(const int64_t model_max,
                         speech ? Result<int64_t>(whisper->max_target_positions) : model_context(model_config, config_path));
  fe->max_context_ = model_max;
  if (config.knobs.has("max_model_len")) {
    PRISM_ASSIGN_OR_RETURN(const int64_t limit, config.knobs.get_int("max_model_len", model_max));
    const std::string where = config.knobs.where("max_model_len");
    if (limit < 2) return invalid_argument(where + " must be at least 2, got " + std::to_string(limit));
    if (limit > model_max)
      return invalid_argument(where + " is " + std::to_string(limit) + ", more than this model's context length of " +
                              std::to_string(model_max) + " tokens");
    fe->max_context_ = limit;
  }

  PRISM_ASSIGN_OR_RETURN(fe->tokenizer_, text::Tokenizer::load(dir.string()));
  // Lengths are ours (resolve_max_tokens), never the tokenizer file's.
  fe->tokenizer_.set_truncation(std::nullopt);
  fe->tokenizer_.set_padding(std::nullopt);
  if (fe->tokenizer_.vocab_size() > fe->vocab_size_)
    PRISM_LOG_WARN("'{}': the tokenizer has {} tokens, more than the model's {} logits; prompts with the extra ids "
                   "are refused",
                   dir.string(), fe->tokenizer_.vocab_size(), fe->vocab_size_);
  // NOTE: a speech model's prompts are token ids the SpeechProcessor builds: no template.
  if (speech) {
    PRISM_ASSIGN_OR_RETURN(fe->speech_, SpeechProcessor::load(dir.string(), *whisper, fe->tokenizer_));
  } else {
    PRISM_ASSIGN_OR_RETURN(fe->chat_template_, load_chat_template(dir, vision_language));
  }
  if (vision_language) {
    PRISM_ASSIGN_OR_RETURN(fe->vision_, VisionProcessor::load(dir.string(), *vlm, config.knobs, fe->tokenizer_));
  }

  // End-of-sequence ids: config.json ∪ generation_config.json ∪ the tokenizer's eos.
  std::vector<int32_t> eos;
  PRISM_RETURN_IF_ERROR(append_eos_ids(model_config, config_path, eos));
  const fs::path generation_path = dir / "generation_config.json";
  std::error_code ec;
  if (fs::is_regular_file(generation_path, ec)) {
    PRISM_ASSIGN_OR_RETURN(json generation, read_json_object(generation_path));
    PRISM_RETURN_IF_ERROR(append_eos_ids(generation, generation_path, eos));
    PRISM_ASSIGN_OR_RETURN(fe->defaults_, sampling_defaults(generation_path));
  }
  if (const auto tokenizer_eos = fe->tokenizer_.special_token_ids().eos) eos.push_back(*tokenizer_eos);
  for (int32_t id : eos) {
    if (id >= fe->vocab_size_) continue;  // never produced by the model
    if (std::find(fe->eos_ids_.begin(), fe->eos_ids_.end(), id) == fe->eos_ids_.end()) fe->eos_ids_.push_back(id);
  }

  PRISM_LOG_INFO("generate frontend '{}': context {} tokens (model {}), vocab {}, eos [{}], chat template {}, "
                 "{}, defaults temperature {} top_p {} top_k {} min_p {} repetition_penalty {}",
                 dir.string(), fe->max_context_, model_max, fe->vocab_size_, join_ids(fe->eos_ids_),
                 fe->chat_template_ ? "yes" : "none",
                 fe->vision_ ? "images and videos" : fe->speech_ ? "speech" : "text only",
                 fe->defaults_.temperature, fe->defaults_.top_p, fe->defaults_.top_k, fe->defaults_.min_p,
                 fe->defaults_.repetition_penalty);
  return std::shared_ptr<const GenerateFrontend>(std::move(fe));
}

Result<std::vector<int32_t>> GenerateFrontend::chat_prompt(const text::ChatRequest& chat) const {
  if (!chat_template_)
    return failed_precondition("this model has no chat template; use /v1/completions with a prompt instead");
  text::ChatRequest request = chat;
  request.add_generation_prompt = true;
  PRISM_ASSIGN_OR_RETURN(std::string prompt, chat_template_->render(request));
  std::vector<int32_t> ids = std::move(tokenizer_.encode(prompt, /*add_special_tokens=*/false).ids);
  if (ids.empty()) return invalid_argument("the chat template rendered an empty prompt for these messages");
  return ids;
}

Result<std::vector<int32_t>> GenerateFrontend::chat_prompt(const text::ChatRequest& chat,
                                                          std::span<const PreparedMedia> media) const {
  if (!vision_) {
    if (!media.empty()) return failed_precondition("this model does not accept image or video input");
    return chat_prompt(chat);
  }
  if (!chat_template_)
    return failed_precondition("this model has no chat template; use /v1/completions with a prompt instead");
  text::ChatRequest request = chat;
  request.add_generation_prompt = true;
  PRISM_ASSIGN_OR_RETURN(std::string rendered, chat_template_->render(request));
  PRISM_ASSIGN_OR_RETURN(std::string prompt, vision_->expand(rendered, media));
  std::vector<int32_t> ids = std::move(tokenizer_.encode(prompt, /*add_special_tokens=*/false).ids);
  if (ids.empty()) return invalid_argument("the chat template rendered an empty prompt for these messages");
  // NOTE: the engine fills the k-th image-token position with the k-th row of the items: a
  // count that differs (the placeholder merged with neighbouring text by the tokenizer) would
  // shift every row after it.
  int64_t rows = 0;
  for (const PreparedMedia& m : media) rows += m.item.num_rows;
  const int64_t slots = std::count(ids.begin(), ids.end(), vision_->image_token_id());
  if (slots != rows)
    return invalid_argument("the prompt has " + std::to_string(slots) + " image token positions for " +
                            std::to_string(rows) + " rows of image and video features");
  return ids;
}

std::vector<int32_t> GenerateFrontend::text_prompt(const std::string& text) const {
  return std::move(tokenizer_.encode(text, /*add_special_tokens=*/true).ids);
}

Result<std::vector<int32_t>> GenerateFrontend::check_ids(const std::vector<int64_t>& ids) const {
  if (ids.empty()) return invalid_argument("the prompt is an empty token array");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size_)
      return out_of_range("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                          " is outside this model's vocabulary of " + std::to_string(vocab_size_) + " ids");
    out.push_back(int32_t(ids[i]));
  }
  return out;
}

Result<int> GenerateFrontend::resolve_max_tokens(int64_t prompt_tokens, std::optional<int64_t> max_tokens) const {
  const std::string limit = "This model's maximum context length is " + std::to_string(max_context_) + " tokens. ";
  if (max_tokens) {
    if (*max_tokens < 1) return invalid_argument("max_tokens must be at least 1, got " + std::to_string(*max_tokens));
    if (*max_tokens > max_context_ - prompt_tokens)
      return invalid_argument(limit + "However, you requested " + std::to_string(prompt_tokens + *max_tokens) +
                              " tokens (" + std::to_string(prompt_tokens) + " in the messages, " +
                              std::to_string(*max_tokens) +
                              " in the completion). Please reduce the length of the messages or completion.");
    return int(*max_tokens);
  }
  if (prompt_tokens >= max_context_)
    return invalid_argument(limit + "However, your messages resulted in " + std::to_string(prompt_tokens) +
                            " tokens, which leaves no room for the completion. Please reduce the length of the "
                            "messages.");
  return int(max_context_ - prompt_tokens);
}

// NOTE: the bytes a token contributes to a text, for logprobs. Decoding the id alone gives
// that for most tokens, but not for a piece holding part of a UTF-8 character (the decoder
// renders it as U+FFFD): those come from the piece itself (a byte-level BPE alphabet, or a
// SentencePiece <0xNN> byte piece). A SentencePiece decode drops a lone piece's leading space;
// the "▁" says it was there.
std::string GenerateFrontend::token_text(int32_t token) const {
  if (token < 0 || token >= tokenizer_.vocab_size()) return {};
  const std::string piece = tokenizer_.id_to_token(token);
  const int32_t ids[] = {token};
  auto decoded = tokenizer_.decode(ids, /*skip_special_tokens=*/false);
  std::string text = decoded ? std::move(*decoded) : piece;
  const bool lossy = text.find("\xEF\xBF\xBD") != std::string::npos && piece.find("\xEF\xBF\xBD") == std::string::npos;
  if (!lossy) {
    if (piece.starts_with("\xE2\x96\x81") && !text.starts_with(' ')) text.insert(text.begin(), ' ');
    return text;
  }
  if (piece.size() == 6 && piece.starts_with("<0x") && piece.ends_with('>') && std::isxdigit((unsigned char)piece[3]) &&
      std::isxdigit((unsigned char)piece[4]))
    return std::string(1, char(std::strtol(piece.substr(3, 2).c_str(), nullptr, 16)));
  std::string bytes;
  for (size_t i = 0; i < piece.size();) {
    const int b = text::unicode_to_byte(text::next_code_point(piece, i));
    if (b < 0) return text;
    bytes.push_back(char(b));
  }
  return bytes;
}

}  // namespace prism::frontends
