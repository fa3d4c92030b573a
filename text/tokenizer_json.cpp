// Loader of Hugging Face tokenizer.json into a Pipeline: parses each section into native
// configs and components once, at load. NOTE: anything it does not implement is an
// unimplemented Status naming the section and type — never an approximation.
#include <nlohmann/json.hpp>

#include "text/pipeline.h"
#include "text/precompiled.h"
#include "text/utf8.h"

namespace prism::text {
namespace {

using json = nlohmann::json;

Status unsupported(const std::string& section, const std::string& type) {
  return unimplemented("tokenizer.json: unsupported " + section + " type '" + type + "'");
}

Status bad(const std::string& what) { return invalid_argument("tokenizer.json: " + what); }

std::string type_of(const json& j) { return j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>() : ""; }

template <class T>
T value_or(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<T>();
}

// {"String": "..."} or {"Regex": "..."}, both as a compiled Regex.
Result<Regex> parse_pattern(const json& j, const std::string& where) {
  if (j.contains("String")) return Regex::literal(j["String"].get<std::string>());
  if (j.contains("Regex")) {
    auto r = Regex::compile(j["Regex"].get<std::string>());
    if (!r) return bad(where + ": " + r.status().message());
    return r;
  }
  return bad(where + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

// ---- normalizers ----

Result<std::unique_ptr<Normalizer>> parse_normalizer(const json& j) {
  const std::string type = type_of(j);
  if (type == "BertNormalizer") {
    BertNormalizerConfig c;
    c.clean_text = value_or(j, "clean_text", true);
    c.handle_chinese_chars = value_or(j, "handle_chinese_chars", true);
    if (j.contains("strip_accents") && !j["strip_accents"].is_null()) c.strip_accents = j["strip_accents"].get<bool>();
    c.lowercase = value_or(j, "lowercase", true);
    return std::unique_ptr<Normalizer>(new BertNormalizer(c));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UnicodeForm::nfkd));
  if (type == "Nmt") return std::unique_ptr<Normalizer>(new NmtNormalizer());
  if (type == "Precompiled") {
    // Base64 of SentencePiece's normalizer_spec.precompiled_charsmap; null or "": no rules.
    std::string blob;
    if (j.contains("precompiled_charsmap") && !j["precompiled_charsmap"].is_null()) {
      auto decoded = base64_decode(j["precompiled_charsmap"].get<std::string>());
      if (!decoded) return bad("normalizer Precompiled: " + decoded.status().message());
      blob = std::move(*decoded);
    }
    auto map = CharsMap::parse(blob);
    if (!map) return bad("normalizer Precompiled: " + map.status().message());
    return std::unique_ptr<Normalizer>(new PrecompiledNormalizer(std::move(*map)));
  }
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Replace") {
    PRISM_ASSIGN_OR_RETURN(Regex pattern, parse_pattern(j.at("pattern"), "normalizer Replace"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(pattern), j.at("content").get<std::string>()));
  }
  if (type == "Prepend") return std::unique_ptr<Normalizer>(new PrependNormalizer(j.at("prepend").get<std::string>()));
  if (type == "Strip")
    return std::unique_ptr<Normalizer>(new StripNormalizer(value_or(j, "strip_left", true), value_or(j, "strip_right", true)));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const json& s : j.at("normalizers")) {
      PRISM_ASSIGN_OR_RETURN(auto step, parse_normalizer(s));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(steps)));
  }
  return unsupported("normalizer", type);
}

// ---- pre-tokenizers ----

Result<SplitBehavior> parse_behavior(const json& j, SplitBehavior fallback) {
  if (j.is_null()) return fallback;
  const std::string b = j.get<std::string>();
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  return bad("unknown split behavior '" + b + "'");
}

Result<PrependScheme> parse_prepend_scheme(const json& j) {
  // Newer files say prepend_scheme; older ones only add_prefix_space.
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return PrependScheme::always;
    if (s == "first") return PrependScheme::first;
    if (s == "never") return PrependScheme::never;
    return bad("unknown Metaspace prepend_scheme '" + s + "'");
  }
  return value_or(j, "add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
}

Result<std::string> parse_replacement(const json& j) {
  const std::string r = value_or<std::string>(j, "replacement", "\xE2\x96\x81");
  size_t i = 0;
  if (r.empty() || (next_code_point(r, i), i != r.size())) return bad("Metaspace replacement must be one character");
  return r;
}

Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const json& j) {
  const std::string type = type_of(j);
  if (type == "BertPreTokenizer") return std::unique_ptr<PreTokenizer>(new BertPreTokenizer());
  if (type == "ByteLevel") {
    PRISM_ASSIGN_OR_RETURN(auto p, ByteLevelPreTokenizer::create(value_or(j, "add_prefix_space", true),
                                                                 value_or(j, "use_regex", true)));
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  if (type == "Metaspace") {
    PRISM_ASSIGN_OR_RETURN(std::string replacement, parse_replacement(j));
    PRISM_ASSIGN_OR_RETURN(PrependScheme scheme, parse_prepend_scheme(j));
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, scheme, value_or(j, "split", true)));
  }
  if (type == "Split") {
    PRISM_ASSIGN_OR_RETURN(Regex pattern, parse_pattern(j.at("pattern"), "pre_tokenizer Split"));
    PRISM_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(j.at("behavior"), SplitBehavior::isolated));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(pattern), behavior, value_or(j, "invert", false)));
  }
  if (type == "Digits") return std::unique_ptr<PreTokenizer>(new DigitsPreTokenizer(value_or(j, "individual_digits", false)));
  if (type == "Punctuation") {
    PRISM_ASSIGN_OR_RETURN(SplitBehavior behavior,
                           parse_behavior(j.contains("behavior") ? j["behavior"] : json(), SplitBehavior::isolated));
    return std::unique_ptr<PreTokenizer>(new PunctuationPreTokenizer(behavior));
  }
  if (type == "Whitespace") {
    PRISM_ASSIGN_OR_RETURN(auto p, WhitespacePreTokenizer::create());
    return std::unique_ptr<PreTokenizer>(std::move(p));
  }
  if (type == "WhitespaceSplit") return std::unique_ptr<PreTokenizer>(new WhitespaceSplitPreTokenizer());
  if (type == "CharDelimiterSplit") {
    const std::string d = j.at("delimiter").get<std::string>();
    size_t i = 0;
    if (d.empty()) return bad("CharDelimiterSplit delimiter is empty");
    return std::unique_ptr<PreTokenizer>(new CharDelimiterSplitPreTokenizer(next_code_point(d, i)));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const json& s : j.at("pretokenizers")) {
      PRISM_ASSIGN_OR_RETURN(auto step, parse_pre_tokenizer(s));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  return unsupported("pre_tokenizer", type);
}

// ---- post-processors ----

Result<std::vector<TemplatePiece>> parse_template(const json& j, const std::string& which) {
  std::vector<TemplatePiece> pieces;
  for (const json& p : j) {
    TemplatePiece t;
    const json* body;
    if (p.contains("Sequence")) {
      body = &p["Sequence"];
      t.is_sequence = true;
    } else if (p.contains("SpecialToken")) {
      body = &p["SpecialToken"];
    } else {
      return bad("TemplateProcessing " + which + ": piece is neither Sequence nor SpecialToken");
    }
    t.name = body->at("id").get<std::string>();
    t.type_id = value_or(*body, "type_id", 0);
    if (t.is_sequence && t.name != "A" && t.name != "B") return bad("TemplateProcessing sequence id must be A or B");
    pieces.push_back(std::move(t));
  }
  return pieces;
}

Result<std::unique_ptr<PostProcessor>> parse_post_processor(const json& j) {
  const std::string type = type_of(j);
  if (type == "TemplateProcessing") {
    PRISM_ASSIGN_OR_RETURN(auto single, parse_template(j.at("single"), "single"));
    PRISM_ASSIGN_OR_RETURN(auto pair, parse_template(j.at("pair"), "pair"));
    std::map<std::string, std::vector<TokenId>> specials;
    for (const auto& [name, s] : j.at("special_tokens").items()) specials[name] = s.at("ids").get<std::vector<TokenId>>();
    for (const auto* t : {&single, &pair})
      for (const TemplatePiece& p : *t)
        if (!p.is_sequence && !specials.count(p.name))
          return bad("TemplateProcessing uses special token '" + p.name + "' missing from special_tokens");
    return std::unique_ptr<PostProcessor>(new TemplateProcessor(std::move(single), std::move(pair), std::move(specials)));
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    // "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]
    const TokenId sep = j.at("sep").at(1).get<TokenId>(), cls = j.at("cls").at(1).get<TokenId>();
    if (type == "BertProcessing") return std::unique_ptr<PostProcessor>(new BertProcessor(cls, sep));
    return std::unique_ptr<PostProcessor>(new RobertaProcessor(cls, sep));
  }
  if (type == "ByteLevel") return std::unique_ptr<PostProcessor>(new IdentityProcessor());
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const json& s : j.at("processors")) {
      PRISM_ASSIGN_OR_RETURN(auto step, parse_post_processor(s));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<PostProcessor>(new SequenceProcessor(std::move(steps)));
  }
  return unsupported("post_processor", type);
}

// ---- decoders ----

Result<std::unique_ptr<Decoder>> parse_decoder(const json& j) {
  const std::string type = type_of(j);
  if (type == "WordPiece")
    return std::unique_ptr<Decoder>(new WordPieceDecoder(value_or<std::string>(j, "prefix", "##"), value_or(j, "cleanup", true)));
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "Metaspace") {
    PRISM_ASSIGN_OR_RETURN(std::string replacement, parse_replacement(j));
    PRISM_ASSIGN_OR_RETURN(PrependScheme scheme, parse_prepend_scheme(j));
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(replacement, scheme != PrependScheme::never));
  }
  if (type == "BPEDecoder") return std::unique_ptr<Decoder>(new BpeDecoder(value_or<std::string>(j, "suffix", "</w>")));
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip")
    return std::unique_ptr<Decoder>(new StripDecoder(j.at("content").get<std::string>(), value_or<size_t>(j, "start", 0),
                                                     value_or<size_t>(j, "stop", 0)));
  if (type == "Replace") {
    PRISM_ASSIGN_OR_RETURN(Regex pattern, parse_pattern(j.at("pattern"), "decoder Replace"));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(pattern), j.at("content").get<std::string>()));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const json& s : j.at("decoders")) {
      PRISM_ASSIGN_OR_RETURN(auto step, parse_decoder(s));
      steps.push_back(std::move(step));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(steps)));
  }
  return unsupported("decoder", type);
}

// ---- model ----

Result<std::vector<std::pair<std::string, TokenId>>> parse_vocab_map(const json& vocab) {
  if (!vocab.is_object()) return bad("model vocab must be an object of token -> id");
  std::vector<std::pair<std::string, TokenId>> v;
  v.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items()) v.emplace_back(token, id.get<TokenId>());
  return v;
}

// The model's own errors, said to come from tokenizer.json.
Result<std::unique_ptr<TokenModel>> with_context(Result<std::unique_ptr<TokenModel>> r) {
  if (r) return r;
  return Status(r.status().code(), "tokenizer.json: model: " + r.status().message());
}

// Old serializations have no "type": the fields tell the kind.
std::string infer_model_type(const json& m) {
  if (m.contains("merges")) return "BPE";
  if (m.contains("vocab") && m["vocab"].is_array()) return "Unigram";
  if (m.contains("continuing_subword_prefix") && m.contains("max_input_chars_per_word")) return "WordPiece";
  if (m.contains("vocab") && m.contains("unk_token")) return "WordLevel";
  return "";
}

Result<std::unique_ptr<TokenModel>> parse_model(const json& m) {
  std::string type = type_of(m);
  if (type.empty()) type = infer_model_type(m);
  if (type == "WordPiece") {
    WordPieceConfig c;
    PRISM_ASSIGN_OR_RETURN(c.vocab, parse_vocab_map(m.at("vocab")));
    c.unk_token = value_or<std::string>(m, "unk_token", "[UNK]");
    c.continuing_subword_prefix = value_or<std::string>(m, "continuing_subword_prefix", "##");
    c.max_input_chars_per_word = value_or(m, "max_input_chars_per_word", 100);
    return with_context(make_wordpiece(std::move(c)));
  }
  if (type == "BPE") {
    const double dropout = value_or(m, "dropout", 0.0);
    if (dropout > 0.0 && dropout < 1.0) return unimplemented("tokenizer.json: BPE dropout is not supported");
    BpeConfig c;
    PRISM_ASSIGN_OR_RETURN(c.vocab, parse_vocab_map(m.at("vocab")));
    for (const json& merge : m.at("merges")) {
      if (merge.is_string()) {  // older "a b"
        const std::string s = merge.get<std::string>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
          return bad("BPE merge '" + s + "' is not two tokens");
        c.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else {  // newer ["a", "b"]
        if (!merge.is_array() || merge.size() != 2) return bad("BPE merge is not a pair");
        c.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      }
    }
    if (m.contains("unk_token") && !m["unk_token"].is_null()) c.unk_token = m["unk_token"].get<std::string>();
    c.continuing_subword_prefix = value_or<std::string>(m, "continuing_subword_prefix", "");
    c.end_of_word_suffix = value_or<std::string>(m, "end_of_word_suffix", "");
    c.fuse_unk = value_or(m, "fuse_unk", false);
    c.byte_fallback = value_or(m, "byte_fallback", false);
    c.ignore_merges = value_or(m, "ignore_merges", false);
    return with_context(make_bpe(std::move(c)));
  }
  if (type == "Unigram") {
    UnigramConfig c;
    if (!m.at("vocab").is_array()) return bad("Unigram vocab must be a list of [piece, score]");
    for (const json& entry : m.at("vocab")) c.vocab.emplace_back(entry.at(0).get<std::string>(), entry.at(1).get<double>());
    if (m.contains("unk_id") && !m["unk_id"].is_null()) c.unk_id = m["unk_id"].get<TokenId>();
    c.byte_fallback = value_or(m, "byte_fallback", false);
    return with_context(make_unigram(std::move(c)));
  }
  return unsupported("model", type.empty() ? "(none, and not inferable)" : type);
}

// ---- added tokens, truncation, padding ----

std::vector<AddedToken> parse_added_tokens(const json& j) {
  std::vector<AddedToken> tokens;
  if (!j.is_array()) return tokens;
  for (const json& t : j) {
    AddedToken a;
    a.id = t.at("id").get<TokenId>();
    a.content = t.at("content").get<std::string>();
    a.special = value_or(t, "special", false);
    a.single_word = value_or(t, "single_word", false);
    a.lstrip = value_or(t, "lstrip", false);
    a.rstrip = value_or(t, "rstrip", false);
    a.normalized = value_or(t, "normalized", !a.special);
    tokens.push_back(std::move(a));
  }
  return tokens;
}

Result<Direction> parse_direction(const json& j, const char* key) {
  const std::string d = value_or<std::string>(j, key, "Right");
  if (d == "Right") return Direction::right;
  if (d == "Left") return Direction::left;
  return bad(std::string(key) + " '" + d + "' is neither Left nor Right");
}

Result<std::optional<TruncationConfig>> parse_truncation(const json& j) {
  if (j.is_null()) return std::optional<TruncationConfig>();
  TruncationConfig t;
  t.max_length = j.at("max_length").get<size_t>();
  const std::string s = value_or<std::string>(j, "strategy", "LongestFirst");
  if (s == "LongestFirst") t.strategy = TruncationStrategy::longest_first;
  else if (s == "OnlyFirst") t.strategy = TruncationStrategy::only_first;
  else if (s == "OnlySecond") t.strategy = TruncationStrategy::only_second;
  else return bad("unknown truncation strategy '" + s + "'");
  PRISM_ASSIGN_OR_RETURN(t.direction, parse_direction(j, "direction"));
  t.stride = value_or<size_t>(j, "stride", 0);
  return std::optional<TruncationConfig>(t);
}

Result<std::optional<PaddingConfig>> parse_padding(const json& j) {
  if (j.is_null()) return std::optional<PaddingConfig>();
  PaddingConfig p;
  const json& s = j.at("strategy");
  if (s.is_string() && s.get<std::string>() == "BatchLongest") {
    p.strategy = PaddingStrategy::batch_longest;
  } else if (s.is_object() && s.contains("Fixed")) {
    p.strategy = PaddingStrategy::fixed;
    p.fixed_length = s["Fixed"].get<size_t>();
  } else {
    return bad("unknown padding strategy " + s.dump());
  }
  PRISM_ASSIGN_OR_RETURN(p.direction, parse_direction(j, "direction"));
  p.pad_id = value_or(j, "pad_id", 0);
  p.pad_type_id = value_or(j, "pad_type_id", 0);
  p.pad_token = value_or<std::string>(j, "pad_token", "[PAD]");
  if (j.contains("pad_to_multiple_of") && !j["pad_to_multiple_of"].is_null())
    p.pad_to_multiple_of = j["pad_to_multiple_of"].get<size_t>();
  return std::optional<PaddingConfig>(p);
}

Result<LoadedTokenizer> build(const json& j) {
  PipelineParts parts;
  if (!j.contains("model")) return bad("no \"model\"");
  PRISM_ASSIGN_OR_RETURN(parts.model, parse_model(j["model"]));
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    PRISM_ASSIGN_OR_RETURN(parts.normalizer, parse_normalizer(j["normalizer"]));
  }
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    PRISM_ASSIGN_OR_RETURN(parts.pre_tokenizer, parse_pre_tokenizer(j["pre_tokenizer"]));
  }
  if (j.contains("post_processor") && !j["post_processor"].is_null()) {
    PRISM_ASSIGN_OR_RETURN(parts.post_processor, parse_post_processor(j["post_processor"]));
  }
  if (j.contains("decoder") && !j["decoder"].is_null()) {
    PRISM_ASSIGN_OR_RETURN(parts.decoder, parse_decoder(j["decoder"]));
  }
  parts.added_tokens = parse_added_tokens(j.contains("added_tokens") ? j["added_tokens"] : json());
  LoadedTokenizer out;
  PRISM_ASSIGN_OR_RETURN(out.truncation, parse_truncation(j.contains("truncation") ? j["truncation"] : json()));
  PRISM_ASSIGN_OR_RETURN(out.padding, parse_padding(j.contains("padding") ? j["padding"] : json()));
  out.backend = std::make_unique<Pipeline>(std::move(parts));
  return out;
}

}  // namespace

Result<LoadedTokenizer> load_tokenizer_json(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  // nlohmann throws on a field of the wrong type; that is malformed input, not a bug.
  try {
    return build(j);
  } catch (const json::exception& e) {
    return bad(std::string("malformed: ") + e.what());
  }
}

}  // namespace prism::text
