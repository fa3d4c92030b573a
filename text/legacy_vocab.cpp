// Older tokenizer layouts turned into the same Pipeline tokenizer.json would give:
// vocab.txt -> BERT WordPiece (BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]);
// vocab.json + merges.txt -> GPT-2 byte-level BPE. What HF's slow-to-fast converters build.
#include <nlohmann/json.hpp>

#include "text/pipeline.h"

namespace prism::text {
namespace {

// Lines without their "\n" / "\r\n".
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    start = end + 1;
  }
  return lines;
}

AddedToken special_token(std::string content, TokenId id) {
  AddedToken t;
  t.content = std::move(content);
  t.id = id;
  t.special = true;
  t.normalized = false;
  return t;
}

}  // namespace

Result<LoadedTokenizer> load_bert_vocab(const std::string& vocab_txt_path, bool lowercase) {
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(vocab_txt_path));
  WordPieceConfig config;
  std::map<std::string, TokenId> ids;
  const std::vector<std::string> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    config.vocab.emplace_back(lines[i], static_cast<TokenId>(i));
    ids.emplace(lines[i], static_cast<TokenId>(i));
  }
  for (const char* required : {"[UNK]", "[CLS]", "[SEP]"})
    if (!ids.count(required)) return invalid_argument(vocab_txt_path + ": BERT vocab has no " + required);

  PipelineParts parts;
  PRISM_ASSIGN_OR_RETURN(parts.model, make_wordpiece(std::move(config)));
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (ids.count(name)) parts.added_tokens.push_back(special_token(name, ids[name]));
  BertNormalizerConfig norm;
  norm.lowercase = lowercase;
  parts.normalizer = std::make_unique<BertNormalizer>(norm);
  parts.pre_tokenizer = std::make_unique<BertPreTokenizer>();
  const std::vector<TemplatePiece> single = {{false, "[CLS]", 0}, {true, "A", 0}, {false, "[SEP]", 0}};
  const std::vector<TemplatePiece> pair = {{false, "[CLS]", 0}, {true, "A", 0}, {false, "[SEP]", 0},
                                           {true, "B", 1},      {false, "[SEP]", 1}};
  parts.post_processor = std::make_unique<TemplateProcessor>(
      single, pair, std::map<std::string, std::vector<TokenId>>{{"[CLS]", {ids["[CLS]"]}}, {"[SEP]", {ids["[SEP]"]}}});
  parts.decoder = std::make_unique<WordPieceDecoder>("##", true);
  LoadedTokenizer out;
  out.backend = std::make_unique<Pipeline>(std::move(parts));
  return out;
}

Result<LoadedTokenizer> load_gpt2_vocab(const std::string& vocab_json_path, const std::string& merges_txt_path) {
  PRISM_ASSIGN_OR_RETURN(std::string vocab_text, read_file(vocab_json_path));
  PRISM_ASSIGN_OR_RETURN(std::string merges_text, read_file(merges_txt_path));
  const nlohmann::json vocab = nlohmann::json::parse(vocab_text, nullptr, /*allow_exceptions=*/false);
  if (!vocab.is_object()) return invalid_argument(vocab_json_path + ": not a JSON object of token -> id");

  BpeConfig config;
  std::optional<TokenId> end_of_text;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) return invalid_argument(vocab_json_path + ": id of '" + token + "' is not an integer");
    config.vocab.emplace_back(token, id.get<TokenId>());
    if (token == "<|endoftext|>") end_of_text = id.get<TokenId>();
  }
  const std::vector<std::string> lines = split_lines(merges_text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty() || (i == 0 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      return invalid_argument(merges_txt_path + ":" + std::to_string(i + 1) + ": merge '" + line + "' is not two tokens");
    config.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }

  PipelineParts parts;
  PRISM_ASSIGN_OR_RETURN(parts.model, make_bpe(std::move(config)));
  if (end_of_text) parts.added_tokens.push_back(special_token("<|endoftext|>", *end_of_text));
  PRISM_ASSIGN_OR_RETURN(auto pre, ByteLevelPreTokenizer::create(/*add_prefix_space=*/false, /*use_regex=*/true));
  parts.pre_tokenizer = std::move(pre);
  parts.post_processor = std::make_unique<IdentityProcessor>();
  parts.decoder = std::make_unique<ByteLevelDecoder>();
  LoadedTokenizer out;
  out.backend = std::make_unique<Pipeline>(std::move(parts));
  return out;
}

}  // namespace prism::text
