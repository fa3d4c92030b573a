// frontends/speech_processor.cpp: Whisper's tokens, prompts, logit rules and segment
// parsing, read from the checkpoint's files (config.json through configs::WhisperConfig,
// generation_config.json, the tokenizer's added tokens) — never from hard-coded ids. The rules are openai/whisper's
// decoding.py filters (SuppressBlank, SuppressTokens, ApplyTimestampRules) and its language
// detection, run per row on the engine thread. It must not run the model or see batches.
#include "frontends/speech_processor.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
constexpr double kTimePrecision = 0.02;  // seconds per timestamp token: 30 s over 1500 positions
constexpr int kLastTimestampIndex = 1500;  // <|30.00|>

struct LanguageName {
  std::string_view code, name;
};

// openai/whisper's LANGUAGES, in token order (the 100th, yue, is large-v3's).
constexpr LanguageName kLanguages[] = {
    {"en", "english"},     {"zh", "chinese"},     {"de", "german"},        {"es", "spanish"},
    {"ru", "russian"},     {"ko", "korean"},      {"fr", "french"},        {"ja", "japanese"},
    {"pt", "portuguese"},  {"tr", "turkish"},     {"pl", "polish"},        {"ca", "catalan"},
    {"nl", "dutch"},       {"ar", "arabic"},      {"sv", "swedish"},       {"it", "italian"},
    {"id", "indonesian"},  {"hi", "hindi"},       {"fi", "finnish"},       {"vi", "vietnamese"},
    {"he", "hebrew"},      {"uk", "ukrainian"},   {"el", "greek"},         {"ms", "malay"},
    {"cs", "czech"},       {"ro", "romanian"},    {"da", "danish"},        {"hu", "hungarian"},
    {"ta", "tamil"},       {"no", "norwegian"},   {"th", "thai"},          {"ur", "urdu"},
    {"hr", "croatian"},    {"bg", "bulgarian"},   {"lt", "lithuanian"},    {"la", "latin"},
    {"mi", "maori"},       {"ml", "malayalam"},   {"cy", "welsh"},         {"sk", "slovak"},
    {"te", "telugu"},      {"fa", "persian"},     {"lv", "latvian"},       {"bn", "bengali"},
    {"sr", "serbian"},     {"az", "azerbaijani"}, {"sl", "slovenian"},     {"kn", "kannada"},
    {"et", "estonian"},    {"mk", "macedonian"},  {"br", "breton"},        {"eu", "basque"},
    {"is", "icelandic"},   {"hy", "armenian"},    {"ne", "nepali"},        {"mn", "mongolian"},
    {"bs", "bosnian"},     {"kk", "kazakh"},      {"sq", "albanian"},      {"sw", "swahili"},
    {"gl", "galician"},    {"mr", "marathi"},     {"pa", "punjabi"},       {"si", "sinhala"},
    {"km", "khmer"},       {"sn", "shona"},       {"yo", "yoruba"},        {"so", "somali"},
    {"af", "afrikaans"},   {"oc", "occitan"},     {"ka", "georgian"},      {"be", "belarusian"},
    {"tg", "tajik"},       {"sd", "sindhi"},      {"gu", "gujarati"},      {"am", "amharic"},
    {"yi", "yiddish"},     {"lo", "lao"},         {"uz", "uzbek"},         {"fo", "faroese"},
    {"ht", "haitian creole"}, {"ps", "pashto"},   {"tk", "turkmen"},       {"nn", "nynorsk"},
    {"mt", "maltese"},     {"sa", "sanskrit"},    {"lb", "luxembourgish"}, {"my", "myanmar"},
    {"bo", "tibetan"},     {"tl", "tagalog"},     {"mg", "malagasy"},      {"as", "assamese"},
    {"tt", "tatar"},       {"haw", "hawaiian"},   {"ln", "lingala"},       {"ha", "hausa"},
    {"ba", "bashkir"},     {"jw", "javanese"},    {"su", "sundanese"},     {"yue", "cantonese"},
};

// openai/whisper's TO_LANGUAGE_CODE aliases.
constexpr LanguageName kLanguageAliases[] = {
    {"my", "burmese"},   {"ca", "valencian"}, {"nl", "flemish"},   {"ht", "haitian"},
    {"lb", "letzeburgesch"}, {"ps", "pushto"}, {"pa", "panjabi"},  {"ro", "moldavian"},
    {"ro", "moldovan"},  {"si", "sinhalese"}, {"es", "castilian"}, {"zh", "mandarin"},
};

// The transcribe deployment's orchestration knobs (pipelines/transcribe: TranscribeSettings,
// VadSettings, LiveSettings).
constexpr std::string_view kKnobNames[] = {
    "vad",           "vad_model",         "vad_deployment",  "vad_threshold",   "vad_min_speech_ms",  "vad_min_silence_ms",
    "vad_speech_pad_ms", "asr_chunk_seconds", "asr_parallel_chunks", "max_audio_seconds", "live_tick_ms",
    "live_partial_ms", "live_window_seconds", "live_max_utterance_seconds", "live_stall_seconds"};

Result<json> read_json_object(const fs::path& path) {
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

// An integer field of `j`: none when absent or null; invalid_argument when not an integer.
Result<std::optional<int64_t>> optional_int(const json& j, const char* key, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<int64_t>();
  if (!it->is_number_integer()) return invalid_argument(origin + ": \"" + key + "\" must be an integer");
  return std::optional<int64_t>(it->get<int64_t>());
}

// A list of token ids (`key` of j), or none when absent or null.
Result<std::optional<std::vector<int32_t>>> optional_ids(const json& j, const char* key, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::optional<std::vector<int32_t>>();
  if (!it->is_array()) return invalid_argument(origin + ": \"" + key + "\" must be a list of token ids");
  std::vector<int32_t> ids;
  for (const json& v : *it) {
    if (!v.is_number_integer()) return invalid_argument(origin + ": \"" + key + "\" must be a list of token ids");
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return std::optional<std::vector<int32_t>>(std::move(ids));
}

std::string lowercase_trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  s = s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string language_token_text(std::string_view code) { return "<|" + std::string(code) + "|>"; }

// Sets every logit in [from, to) to -inf (clamped to the row).
void mask_range(std::span<float> logits, int64_t from, int64_t to) {
  from = std::clamp<int64_t>(from, 0, int64_t(logits.size()));
  to = std::clamp<int64_t>(to, from, int64_t(logits.size()));
  std::fill(logits.begin() + from, logits.begin() + to, kMinusInf);
}

void mask(std::span<float> logits, int64_t id) {
  if (id >= 0 && id < int64_t(logits.size())) logits[size_t(id)] = kMinusInf;
}

// Leaves `id` the only finite entry, keeping its value (0 when it had none).
void force(std::span<float> logits, int32_t id) {
  PRISM_CHECK(id >= 0 && size_t(id) < logits.size());
  const float v = logits[size_t(id)];
  std::fill(logits.begin(), logits.end(), kMinusInf);
  logits[size_t(id)] = std::isfinite(v) ? v : 0.0f;
}

// What one request's processors share (immutable; built once by rules()).
struct WhisperRules {
  int64_t sot_position = -1;
  // The steps before the text: kDetect (the language, by argmax) or a forced token.
  static constexpr int32_t kDetect = -1;
  std::vector<int32_t> forced;
  std::string known_language;  // the observation's language when it is not detected
  std::vector<std::pair<std::string, int32_t>> languages;  // detection candidates
  std::vector<int32_t> begin_suppress, suppress;           // sorted, unique
  bool timestamps = true;
  int32_t eot = -1, no_timestamps = -1, timestamp_begin = -1, no_speech = -1;
  int max_initial_index = -1;  // -1: none
  int max_index = kLastTimestampIndex;  // segment_seconds' last timestamp
};

class WhisperLogitsProcessor final : public LogitsProcessor {
 public:
  WhisperLogitsProcessor(std::shared_ptr<const WhisperRules> rules,
                         std::shared_ptr<std::vector<SpeechObservation>> observations, int choice)
      : rules_(std::move(rules)), observations_(std::move(observations)), choice_(choice) {
    if (observation()) observation()->language = rules_->known_language;
  }

  int64_t probe_position() const override { return rules_->sot_position; }

  // NOTE: openai/whisper reads no_speech_prob off the raw logits at <|startoftranscript|>,
  // before any filter.
  void probe(std::span<const float> logits) override {
    SpeechObservation* o = observation();
    if (!o || rules_->no_speech < 0 || size_t(rules_->no_speech) >= logits.size()) return;
    float max = kMinusInf;
    for (float v : logits) max = std::max(max, v);
    if (!std::isfinite(max)) return;
    double sum = 0;
    for (float v : logits) sum += std::exp(double(v) - max);
    o->no_speech_prob = float(std::exp(double(logits[size_t(rules_->no_speech)]) - max) / sum);
  }

  void process(std::span<float> logits, std::span<const int32_t> generated) override {
    const WhisperRules& r = *rules_;
    if (generated.size() < r.forced.size()) {
      const int32_t token = r.forced[generated.size()];
      if (token == WhisperRules::kDetect) detect_language(logits);
      else force(logits, token);
      return;
    }
    const std::span<const int32_t> text = generated.subspan(r.forced.size());
    if (text.empty())
      for (int32_t id : r.begin_suppress) mask(logits, id);  // SuppressBlank
    for (int32_t id : r.suppress) mask(logits, id);          // SuppressTokens
    if (r.timestamps) apply_timestamp_rules(logits, text);
    else mask_range(logits, r.timestamp_begin, int64_t(logits.size()));
  }

 private:
  SpeechObservation* observation() const {
    if (!observations_ || choice_ < 0 || size_t(choice_) >= observations_->size()) return nullptr;
    return &(*observations_)[size_t(choice_)];
  }

  // openai/whisper's detect_language: argmax among the language tokens; its probability is
  // the softmax over the language tokens alone.
  void detect_language(std::span<float> logits) {
    const WhisperRules& r = *rules_;
    size_t best = 0;
    float best_value = kMinusInf;
    bool found = false;
    for (size_t i = 0; i < r.languages.size(); ++i) {
      const int32_t id = r.languages[i].second;
      if (size_t(id) >= logits.size()) continue;
      if (!found || logits[size_t(id)] > best_value) best = i, best_value = logits[size_t(id)], found = true;
    }
    PRISM_CHECK_MSG(found, "no language token inside the logits row");
    double sum = 0;
    if (std::isfinite(best_value))
      for (const auto& [code, id] : r.languages)
        if (size_t(id) < logits.size()) sum += std::exp(double(logits[size_t(id)]) - best_value);
    if (SpeechObservation* o = observation()) {
      o->language = r.languages[best].first;
      o->language_prob = sum > 0 ? float(1.0 / sum) : 0.0f;
    }
    force(logits, r.languages[best].second);
  }

  // NOTE: openai/whisper's ApplyTimestampRules, over the text part of the choice (what
  // follows the forced tokens): timestamps come in pairs (a lone timestamp is followed by
  // another or by end-of-text, a pair by text); they never decrease, and a segment is never
  // empty; the first token is a timestamp no later than max_initial_timestamp; a timestamp is
  // forced when the timestamps' total probability beats every text token's. Prism adds: none
  // beyond segment_seconds (the audio in the chunk).
  void apply_timestamp_rules(std::span<float> logits, std::span<const int32_t> text) const {
    const WhisperRules& r = *rules_;
    const int64_t vocab = int64_t(logits.size());
    const int32_t tb = r.timestamp_begin;
    mask(logits, r.no_timestamps);

    const size_t n = text.size();
    const bool last_was_timestamp = n >= 1 && text[n - 1] >= tb;
    const bool penultimate_was_timestamp = n < 2 || text[n - 2] >= tb;
    if (last_was_timestamp) {
      if (penultimate_was_timestamp) mask_range(logits, tb, vocab);  // has to be text
      else mask_range(logits, 0, r.eot);                              // cannot be text
    }
    for (size_t i = n; i-- > 0;) {
      if (text[i] < tb) continue;
      // Timestamps do not decrease; after a closing one the next segment may start there.
      const int64_t first_allowed = (last_was_timestamp && !penultimate_was_timestamp) ? text[i] : text[i] + 1;
      mask_range(logits, tb, first_allowed);
      break;
    }
    if (n == 0) {
      mask_range(logits, 0, tb);
      if (r.max_initial_index >= 0) mask_range(logits, int64_t(tb) + r.max_initial_index + 1, vocab);
    }
    mask_range(logits, int64_t(tb) + r.max_index + 1, vocab);

    // logsumexp(log_softmax[tb:]) > max(log_softmax[:tb]): the normaliser cancels.
    const int64_t split = std::min<int64_t>(tb, vocab);
    float max_text = kMinusInf, max_timestamp = kMinusInf;
    for (int64_t i = 0; i < split; ++i) max_text = std::max(max_text, logits[size_t(i)]);
    for (int64_t i = split; i < vocab; ++i) max_timestamp = std::max(max_timestamp, logits[size_t(i)]);
    if (!std::isfinite(max_timestamp)) return;
    double sum = 0;
    for (int64_t i = split; i < vocab; ++i) sum += std::exp(double(logits[size_t(i)]) - max_timestamp);
    const double timestamp_logsumexp = max_timestamp + std::log(sum);
    if (timestamp_logsumexp > double(max_text)) mask_range(logits, 0, split);
  }

  std::shared_ptr<const WhisperRules> rules_;
  std::shared_ptr<std::vector<SpeechObservation>> observations_;  // shared with the caller
  int choice_;
};

void sort_unique(std::vector<int32_t>& ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
}

// What load() reads besides config.json: generation_config.json (empty when absent) and the
// tokenizer's added tokens, with the vocabulary the ids must fall in.
struct SpeechSources {
  const text::Tokenizer& tokenizer;
  const configs::WhisperConfig& config;
  std::string model_dir, config_origin, gen_origin;
  json gen = json::object();
  int64_t vocab = 0;

  // An id named by generation_config.json (gen_key) or config.json (from_config), else by
  // the tokenizer's token text; invalid_argument when they disagree.
  Result<std::optional<int32_t>> special(const char* gen_key, std::initializer_list<std::string_view> texts,
                                         std::optional<int64_t> from_config) const {
    std::optional<int32_t> by_text;
    std::string text_found;
    for (std::string_view t : texts)
      if (auto id = tokenizer.token_to_id(t)) {
        by_text = *id, text_found = t;
        break;
      }
    std::optional<int64_t> by_key;
    std::string origin = gen_origin;
    if (gen_key) {
      PRISM_ASSIGN_OR_RETURN(by_key, optional_int(gen, gen_key, gen_origin));
      if (!by_key && from_config) by_key = from_config, origin = config_origin;
    }
    if (by_key && by_text && *by_key != *by_text)
      return invalid_argument(origin + ": \"" + gen_key + "\" is " + std::to_string(*by_key) +
                              " but the tokenizer has " + text_found + " at " + std::to_string(*by_text));
    if (by_key) return std::optional<int32_t>(int32_t(*by_key));
    return by_text;
  }

  Result<int32_t> required(std::optional<int32_t> id, std::string_view what) const {
    if (!id) return invalid_argument(model_dir + ": the tokenizer has no " + std::string(what) + " token");
    if (*id < 0 || *id >= vocab)
      return invalid_argument(model_dir + ": " + std::string(what) + " id " + std::to_string(*id) +
                              " is outside the vocabulary of " + std::to_string(vocab));
    return *id;
  }

  // A task token: generation_config's task_to_id, else the tokenizer's.
  Result<std::optional<int32_t>> task(const char* name, std::string_view text) const {
    const auto by_text = tokenizer.token_to_id(text);
    const auto tasks = gen.find("task_to_id");
    if (tasks == gen.end() || !tasks->is_object() || !tasks->contains(name)) return by_text;
    const json& v = (*tasks)[name];
    if (!v.is_number_integer()) return invalid_argument(gen_origin + ": task_to_id." + name + " must be an id");
    const int32_t id = int32_t(v.get<int64_t>());
    if (by_text && *by_text != id)
      return invalid_argument(gen_origin + ": task_to_id." + name + " is " + std::to_string(id) +
                              " but the tokenizer has " + std::string(text) + " at " + std::to_string(*by_text));
    return std::optional<int32_t>(id);
  }

  // The languages (code, id) in id order: generation_config's lang_to_id ("<|en|>": id), else
  // every whisper language the tokenizer has.
  Result<std::vector<std::pair<std::string, int32_t>>> languages() const {
    std::vector<std::pair<std::string, int32_t>> out;
    const auto lang_to_id = gen.find("lang_to_id");
    if (lang_to_id != gen.end() && lang_to_id->is_object()) {
      for (const auto& [key, value] : lang_to_id->items()) {
        if (key.size() < 5 || key.compare(0, 2, "<|") != 0 || key.compare(key.size() - 2, 2, "|>") != 0 ||
            !value.is_number_integer())
          return invalid_argument(gen_origin + ": lang_to_id entries must be \"<|code|>\": id (got \"" + key + "\")");
        const int32_t id = int32_t(value.get<int64_t>());
        const auto by_text = tokenizer.token_to_id(key);
        if (by_text && *by_text != id)
          return invalid_argument(gen_origin + ": lang_to_id." + key + " is " + std::to_string(id) +
                                  " but the tokenizer has it at " + std::to_string(*by_text));
        out.emplace_back(key.substr(2, key.size() - 4), id);
      }
    } else {
      for (const LanguageName& l : kLanguages)
        if (auto id = tokenizer.token_to_id(language_token_text(l.code))) out.emplace_back(std::string(l.code), *id);
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    for (const auto& [code, id] : out) PRISM_RETURN_IF_ERROR(required(id, language_token_text(code)).status());
    return out;
  }

  // suppress_tokens / begin_suppress_tokens: generation_config.json, else config.json (older
  // checkpoints), else none / [" ", <|endoftext|>]. NOTE: negative ids (openai's -1: "the
  // default non-speech set") select nothing here: the checkpoints' files always list the ids.
  Result<std::pair<std::vector<int32_t>, std::vector<int32_t>>> suppress_lists(int32_t eot) const {
    auto from_config = [](const std::optional<std::vector<int64_t>>& ids) {
      if (!ids) return std::optional<std::vector<int32_t>>();
      return std::optional<std::vector<int32_t>>(std::vector<int32_t>(ids->begin(), ids->end()));
    };
    PRISM_ASSIGN_OR_RETURN(auto suppress, optional_ids(gen, "suppress_tokens", gen_origin));
    if (!suppress) suppress = from_config(config.suppress_tokens);
    PRISM_ASSIGN_OR_RETURN(auto begin_suppress, optional_ids(gen, "begin_suppress_tokens", gen_origin));
    if (!begin_suppress) begin_suppress = from_config(config.begin_suppress_tokens);
    if (!begin_suppress) {
      begin_suppress = tokenizer.encode(" ", /*add_special_tokens=*/false).ids;
      begin_suppress->push_back(eot);
    }
    std::pair<std::vector<int32_t>, std::vector<int32_t>> out;
    for (int32_t id : suppress.value_or(std::vector<int32_t>{}))
      if (id >= 0 && id < vocab) out.first.push_back(id);
    for (int32_t id : *begin_suppress)
      if (id >= 0 && id < vocab) out.second.push_back(id);
    return out;
  }
};

}  // namespace

std::span<const std::string_view> SpeechProcessor::knob_names() { return kKnobNames; }

std::string SpeechProcessor::language_name(std::string_view code) {
  for (const LanguageName& l : kLanguages)
    if (l.code == code) return std::string(l.name);
  return std::string(code);
}

Result<std::unique_ptr<const SpeechProcessor>> SpeechProcessor::load(const std::string& model_dir,
                                                                     const text::Tokenizer& tokenizer) {
  PRISM_ASSIGN_OR_RETURN(const configs::WhisperConfig config, configs::WhisperConfig::load(model_dir));
  return load(model_dir, config, tokenizer);
}

Result<std::unique_ptr<const SpeechProcessor>> SpeechProcessor::load(const std::string& model_dir,
                                                                     const configs::WhisperConfig& config,
                                                                     const text::Tokenizer& tokenizer) {
  const fs::path dir(model_dir);
  SpeechSources src{tokenizer, config, model_dir, (dir / "config.json").string(),
                    (dir / "generation_config.json").string()};
  if (fs::exists(src.gen_origin)) {
    PRISM_ASSIGN_OR_RETURN(src.gen, read_json_object(src.gen_origin));
  }
  src.vocab = config.vocab_size;
  std::unique_ptr<SpeechProcessor> p(new SpeechProcessor());
  p->tokenizer_ = &tokenizer;
  p->num_mel_bins_ = int(config.num_mel_bins);
  p->max_target_positions_ = int(std::min<int64_t>(config.max_target_positions, INT32_MAX));
  if (config.max_target_positions < 8 || config.max_target_positions > 1 << 20)
    return invalid_argument(src.config_origin + ": max_target_positions must be in [8, 1048576]");

  PRISM_ASSIGN_OR_RETURN(auto eot, src.special(nullptr, {"<|endoftext|>"}, std::nullopt));
  if (!eot) {
    PRISM_ASSIGN_OR_RETURN(eot, src.special("eos_token_id", {}, config.eos_token_id));
  }
  PRISM_ASSIGN_OR_RETURN(p->eot_, src.required(eot, "<|endoftext|>"));
  PRISM_ASSIGN_OR_RETURN(auto sot, src.special("decoder_start_token_id", {"<|startoftranscript|>"},
                                               config.decoder_start_token_id));
  PRISM_ASSIGN_OR_RETURN(p->sot_, src.required(sot, "<|startoftranscript|>"));
  PRISM_ASSIGN_OR_RETURN(auto no_timestamps, src.special("no_timestamps_token_id", {"<|notimestamps|>"}, std::nullopt));
  PRISM_ASSIGN_OR_RETURN(p->no_timestamps_, src.required(no_timestamps, "<|notimestamps|>"));
  PRISM_ASSIGN_OR_RETURN(auto sot_prev, src.special("prev_sot_token_id", {"<|startofprev|>"}, std::nullopt));
  PRISM_ASSIGN_OR_RETURN(auto sot_lm, src.special(nullptr, {"<|startoflm|>"}, std::nullopt));
  PRISM_ASSIGN_OR_RETURN(auto no_speech, src.special(nullptr, {"<|nospeech|>", "<|nocaptions|>"}, std::nullopt));
  p->sot_prev_ = sot_prev.value_or(-1);
  p->sot_lm_ = sot_lm.value_or(-1);
  p->no_speech_ = no_speech.value_or(-1);
  // Older tokenizer.json files have no timestamp tokens: they follow <|notimestamps|>.
  p->timestamp_begin_ = tokenizer.token_to_id("<|0.00|>").value_or(p->no_timestamps_ + 1);
  if (p->timestamp_begin_ >= src.vocab)
    return invalid_argument(model_dir + ": no room for timestamp tokens: they would start at " +
                            std::to_string(p->timestamp_begin_) + ", the vocabulary has " + std::to_string(src.vocab));

  // English-only or multilingual: generation_config's flag, else openai's rule on the size.
  const auto multilingual_it = src.gen.find("is_multilingual");
  if (multilingual_it != src.gen.end() && multilingual_it->is_boolean()) p->multilingual_ = multilingual_it->get<bool>();
  else p->multilingual_ = src.vocab >= 51865;
  PRISM_ASSIGN_OR_RETURN(auto transcribe, src.task("transcribe", "<|transcribe|>"));
  PRISM_ASSIGN_OR_RETURN(auto translate, src.task("translate", "<|translate|>"));
  if (p->multilingual_) {
    PRISM_ASSIGN_OR_RETURN(p->transcribe_, src.required(transcribe, "<|transcribe|>"));
    PRISM_ASSIGN_OR_RETURN(p->translate_, src.required(translate, "<|translate|>"));
  } else {
    p->transcribe_ = transcribe.value_or(-1);
    p->translate_ = translate.value_or(-1);
  }
  PRISM_ASSIGN_OR_RETURN(auto languages, src.languages());
  for (const auto& entry : languages) p->language_tokens_.push_back(entry.second);
  if (p->multilingual_) {
    if (languages.empty())
      return invalid_argument(model_dir + ": a multilingual whisper model needs language tokens (<|en|> ...) in its "
                                          "tokenizer or generation_config.json's lang_to_id");
    p->languages_ = std::move(languages);
  }
  PRISM_ASSIGN_OR_RETURN(std::tie(p->suppress_tokens_, p->begin_suppress_tokens_), src.suppress_lists(p->eot_));

  PRISM_ASSIGN_OR_RETURN(auto max_initial, optional_int(src.gen, "max_initial_timestamp_index", src.gen_origin));
  if (max_initial) p->max_initial_timestamp_index_ = int(std::clamp<int64_t>(*max_initial, 0, kLastTimestampIndex));
  else if (src.gen.contains("max_initial_timestamp_index")) p->max_initial_timestamp_index_ = -1;  // null: no limit
  return std::unique_ptr<const SpeechProcessor>(std::move(p));
}

Result<std::string> SpeechProcessor::check_language(std::string_view language) const {
  const std::string wanted = lowercase_trimmed(language);
  auto code_of = [&](const std::string& s) -> std::optional<std::string> {
    for (const LanguageName& l : kLanguages)
      if (s == l.code || s == l.name) return std::string(l.code);
    for (const LanguageName& l : kLanguageAliases)
      if (s == l.name) return std::string(l.code);
    return std::nullopt;
  };
  std::optional<std::string> code = code_of(wanted);
  if (!code) {
    const auto region = wanted.find_first_of("-_");
    if (region != std::string::npos && region > 0) code = code_of(wanted.substr(0, region));
  }
  if (!multilingual_) {
    if (code == "en") return std::string("en");
    return invalid_argument("language '" + std::string(language) +
                            "' is not supported: this model is English-only (only 'en')");
  }
  if (code)
    for (const auto& entry : languages_)
      if (entry.first == *code) return *code;
  if (!code)
    return invalid_argument("language '" + std::string(language) +
                            "' is not a language Whisper knows (an ISO 639-1 code such as 'en' or 'fr', or a name "
                            "such as 'english')");
  return invalid_argument("language '" + std::string(language) + "' is not one this model has");
}

std::optional<int32_t> SpeechProcessor::language_token(std::string_view code) const {
  for (const auto& [c, id] : languages_)
    if (c == code) return id;
  return std::nullopt;
}

std::vector<int32_t> SpeechProcessor::prompt(const SpeechDecodeOptions& options) const {
  std::vector<int32_t> tokens;
  if (sot_prev_ >= 0 && !options.previous.empty()) {
    std::vector<int32_t> previous;
    for (int32_t t : options.previous)
      if ((t >= 0 && t < eot_) || (t >= timestamp_begin_ && t < timestamp_begin_ + kLastTimestampIndex + 1))
        previous.push_back(t);
    const size_t keep = std::min(previous.size(), size_t(std::max(max_target_positions_ / 2 - 1, 0)));
    if (keep > 0) {
      tokens.push_back(sot_prev_);
      tokens.insert(tokens.end(), previous.end() - std::ptrdiff_t(keep), previous.end());
    }
  }
  tokens.push_back(sot_);
  std::optional<int32_t> language;
  if (multilingual_ && options.language)
    if (auto code = check_language(*options.language)) language = language_token(*code);
  if (multilingual_ && !language) return tokens;  // detected, then the task forced, by the rules
  if (multilingual_) {
    tokens.push_back(*language);
    tokens.push_back(options.task == SpeechTask::translate ? translate_ : transcribe_);
  }
  if (!options.timestamps) tokens.push_back(no_timestamps_);
  return tokens;
}

int SpeechProcessor::max_new_tokens(size_t prompt_length) const {
  const int64_t room = int64_t(max_target_positions_) - int64_t(prompt_length);
  return int(std::clamp<int64_t>(room, 0, max_new_tokens()));
}

LogitsProcessorFactory SpeechProcessor::rules(const SpeechDecodeOptions& options,
                                              std::shared_ptr<std::vector<SpeechObservation>> observations) const {
  auto r = std::make_shared<WhisperRules>();
  const std::vector<int32_t> prompt_tokens = prompt(options);
  r->sot_position = int64_t(std::find(prompt_tokens.begin(), prompt_tokens.end(), sot_) - prompt_tokens.begin());
  if (multilingual_ && prompt_tokens.back() == sot_) {
    r->forced.push_back(WhisperRules::kDetect);
    r->forced.push_back(options.task == SpeechTask::translate ? translate_ : transcribe_);
    if (!options.timestamps) r->forced.push_back(no_timestamps_);
    r->languages = languages_;
  } else {
    r->known_language = multilingual_ ? *check_language(*options.language) : "en";
  }
  r->begin_suppress = begin_suppress_tokens_;
  r->suppress = suppress_tokens_;
  for (int32_t id : {transcribe_, translate_, sot_, sot_prev_, sot_lm_, no_speech_})
    if (id >= 0) r->suppress.push_back(id);
  r->suppress.insert(r->suppress.end(), language_tokens_.begin(), language_tokens_.end());
  if (options.timestamps) r->suppress.push_back(no_timestamps_);
  sort_unique(r->begin_suppress);
  sort_unique(r->suppress);
  r->timestamps = options.timestamps;
  r->eot = eot_;
  r->no_timestamps = no_timestamps_;
  r->timestamp_begin = timestamp_begin_;
  r->no_speech = no_speech_;
  r->max_initial_index = max_initial_timestamp_index_;
  const double seconds = std::isfinite(options.segment_seconds) ? options.segment_seconds : 30.0;
  r->max_index = int(std::clamp<double>(std::floor(seconds / kTimePrecision + 1e-6), 0, kLastTimestampIndex));
  std::shared_ptr<const WhisperRules> shared = std::move(r);
  return [shared, observations](int choice) -> std::unique_ptr<LogitsProcessor> {
    return std::make_unique<WhisperLogitsProcessor>(shared, observations, choice);
  };
}

std::vector<TimedText> SpeechProcessor::segments(std::span<const int32_t> generated, double segment_seconds) const {
  // NOTE: a timestamp after text closes a segment; a timestamp after a timestamp (or at the
  // start) opens the next. So "<|0.00|> a<|2.00|><|2.00|> b<|4.00|>" is [0, 2] a, [2, 4] b,
  // as openai/whisper slices at consecutive timestamps; a segment with no opening timestamp
  // starts where the previous ended, and trailing text with no closing one ends at
  // segment_seconds (openai re-decodes from there instead; chunks here are decoded once).
  std::vector<TimedText> out;
  std::vector<int32_t> tokens, text_tokens;
  std::optional<double> start;
  double previous_end = 0;
  auto close = [&](double end) {
    TimedText seg;
    seg.start = start.value_or(previous_end);
    seg.end = std::max(end, seg.start);
    seg.text = text(text_tokens);
    seg.tokens = std::move(tokens);
    previous_end = seg.end;
    out.push_back(std::move(seg));
    tokens.clear();
    text_tokens.clear();
    start.reset();
  };
  for (int32_t t : generated) {
    if (t == eot_) break;
    if (t >= timestamp_begin_) {
      const double time = double(t - timestamp_begin_) * kTimePrecision;
      if (!text_tokens.empty()) {
        tokens.push_back(t);
        close(time);
      } else {
        tokens.assign(1, t);
        start = time;
      }
    } else if (t >= 0 && t < eot_) {
      tokens.push_back(t);
      text_tokens.push_back(t);
    }  // other specials (forced language / task / <|notimestamps|>): skipped
  }
  if (!text_tokens.empty()) close(std::max(segment_seconds, start.value_or(previous_end)));
  return out;
}

std::string SpeechProcessor::text(std::span<const int32_t> generated) const {
  std::vector<int32_t> ids;
  const int32_t decodable = std::min(eot_, tokenizer_->vocab_size());
  for (int32_t t : generated) {
    if (t == eot_) break;
    if (t >= 0 && t < decodable) ids.push_back(t);
  }
  auto decoded = tokenizer_->decode(ids, /*skip_special_tokens=*/true);
  return decoded ? std::move(*decoded) : std::string();
}

std::vector<int32_t> SpeechProcessor::encode_text(std::string_view text) const {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const std::string_view trimmed = text.substr(first, text.find_last_not_of(" \t\r\n") - first + 1);
  std::vector<int32_t> ids;
  for (int32_t id : tokenizer_->encode(" " + std::string(trimmed), /*add_special_tokens=*/false).ids)
    if (id < eot_) ids.push_back(id);
  return ids;
}

}  // namespace prism::frontends
