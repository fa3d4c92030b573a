#include "test_util/whisper_tokenizer.h"

#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "test_util/paths.h"

namespace prism::test {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The non-speech ids of the BPE vocabularies (symbols and music marks whisper never
// transcribes), as the real checkpoints' generation_config.json list them before the special
// ids: the .en vocabulary (GPT-2's) and the multilingual one.
const std::vector<int32_t> kEnglishNonSpeech = {
    1,     2,     7,     8,     9,     10,    14,    25,    26,    27,    28,    29,    31,    58,    59,
    60,    61,    62,    63,    90,    91,    92,    93,    357,   366,   438,   532,   685,   705,   796,
    930,   1058,  1220,  1267,  1279,  1303,  1343,  1377,  1391,  1635,  1782,  1875,  2162,  2361,  2488,
    3467,  4008,  4211,  4600,  4808,  5299,  5855,  6329,  7203,  9609,  9959,  10563, 10786, 11420, 11709,
    11907, 13163, 13697, 13700, 14808, 15306, 16410, 16791, 17992, 19203, 19510, 20724, 22305, 22935, 27007,
    30109, 30420, 33409, 34949, 40283, 40493, 40549, 47282, 49146};
const std::vector<int32_t> kMultilingualNonSpeech = {
    1,     2,     7,     8,     9,     10,    14,    25,    26,    27,    28,    29,    31,    58,    59,
    60,    61,    62,    63,    90,    91,    92,    93,    359,   503,   522,   542,   873,   893,   902,
    918,   922,   931,   1350,  1853,  1982,  2460,  2627,  3246,  3253,  3268,  3536,  3846,  3961,  4183,
    4667,  6585,  6647,  7273,  9061,  9383,  10428, 10929, 11938, 12033, 12331, 12562, 13793, 14157, 14635,
    15265, 15618, 16553, 16604, 18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650,
    32302, 32470, 36865, 42863, 47425, 49870, 50254};

json added_token(int32_t id, const std::string& content, bool special) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", !special}, {"special", special}};
}

std::string timestamp_text(int i) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "<|%.2f|>", i * 0.02);
  return buf;
}

Result<json> read_json_or_empty(const fs::path& path) {
  if (!fs::exists(path)) return json::object();
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(path.string()));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return invalid_argument(path.string() + ": not a JSON object");
  return j;
}

}  // namespace

const std::vector<std::string>& whisper_language_codes() {
  static const std::vector<std::string> codes = {
      "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it", "id",
      "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur", "hr", "bg",
      "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn", "et", "mk", "br",
      "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si", "km", "sn", "yo", "so",
      "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo", "ht", "ps", "tk", "nn", "mt",
      "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su", "yue"};
  return codes;
}

Result<WhisperTokenIds> write_whisper_files(const std::string& dir, const WhisperFilesOptions& options) {
  if (options.num_languages < 1 || options.num_languages > int(whisper_language_codes().size()))
    return invalid_argument("num_languages must be in [1, 100]");
  const bool multilingual = options.layout == WhisperLayout::multilingual;
  fs::create_directories(dir);

  PRISM_ASSIGN_OR_RETURN(std::string gpt2_text,
                         read_file((fs::path(testdata_dir()) / "tokenizers" / "gpt2" / "tokenizer.json").string()));
  json t = json::parse(gpt2_text, nullptr, /*allow_exceptions=*/false);
  if (!t.is_object()) return data_loss("testdata gpt2 tokenizer.json is not JSON");

  WhisperTokenIds ids;
  json added = json::array();
  int32_t next = 50256;
  if (multilingual) {
    json& vocab = t["model"]["vocab"];
    vocab.erase("<|endoftext|>");
    vocab["<|filler|>"] = 50256;
    next = 50257;
  } else {
    added.push_back(added_token(50256, "<|endoftext|>", true));  // GPT-2's own, kept
  }
  auto add = [&](const std::string& content, bool special = true) {
    added.push_back(added_token(next, content, special));
    return next++;
  };
  ids.eot = multilingual ? add("<|endoftext|>") : next++;
  ids.sot = add("<|startoftranscript|>");
  ids.first_language = next;
  for (int i = 0; i < options.num_languages; ++i) {
    ids.language_codes.push_back(whisper_language_codes()[size_t(i)]);
    add("<|" + ids.language_codes.back() + "|>");
  }
  ids.translate = add("<|translate|>");
  ids.transcribe = add("<|transcribe|>");
  ids.startoflm = add("<|startoflm|>");
  ids.startofprev = add("<|startofprev|>");
  ids.nospeech = add(options.nocaptions ? "<|nocaptions|>" : "<|nospeech|>");
  ids.notimestamps = add("<|notimestamps|>");
  ids.timestamp_begin = next;
  // NOTE: the Hub's newer files list the timestamps as non-special added tokens.
  if (options.timestamp_tokens)
    for (int i = 0; i <= 1500; ++i) add(timestamp_text(i), /*special=*/false);
  ids.vocab_size = ids.timestamp_begin + 1501;
  t["added_tokens"] = added;
  ids.space = t["model"]["vocab"].value("\u0120", -1);
  PRISM_RETURN_IF_ERROR(write_file((fs::path(dir) / "tokenizer.json").string(), t.dump()));

  const json tokenizer_config = {{"add_prefix_space", false},
                                 {"bos_token", "<|endoftext|>"},
                                 {"eos_token", "<|endoftext|>"},
                                 {"pad_token", "<|endoftext|>"},
                                 {"unk_token", "<|endoftext|>"},
                                 {"errors", "replace"},
                                 {"model_max_length", 1024},
                                 {"processor_class", "WhisperProcessor"},
                                 {"tokenizer_class", "WhisperTokenizer"}};
  PRISM_RETURN_IF_ERROR(write_file((fs::path(dir) / "tokenizer_config.json").string(), tokenizer_config.dump(2)));

  ids.suppress_tokens = multilingual ? kMultilingualNonSpeech : kEnglishNonSpeech;
  for (int32_t id : {ids.sot, ids.translate, ids.transcribe, ids.startoflm, ids.startofprev, ids.nospeech})
    ids.suppress_tokens.push_back(id);

  if (options.generation_config) {
    json g = {{"begin_suppress_tokens", {ids.space, ids.eot}},
              {"bos_token_id", ids.eot},
              {"decoder_start_token_id", ids.sot},
              {"eos_token_id", ids.eot},
              {"forced_decoder_ids", nullptr},
              {"is_multilingual", multilingual},
              {"max_initial_timestamp_index", 50},
              {"max_length", options.max_target_positions},
              {"no_timestamps_token_id", ids.notimestamps},
              {"pad_token_id", ids.eot},
              {"prev_sot_token_id", ids.startofprev},
              {"return_timestamps", false},
              {"suppress_tokens", ids.suppress_tokens},
              {"transformers_version", "4.40.0"}};
    // NOTE: the .en checkpoints' files carry neither map: they have no language to pick.
    if (multilingual) {
      json langs = json::object();
      for (size_t i = 0; i < ids.language_codes.size(); ++i)
        langs["<|" + ids.language_codes[i] + "|>"] = ids.first_language + int32_t(i);
      g["lang_to_id"] = langs;
      g["task_to_id"] = {{"transcribe", ids.transcribe}, {"translate", ids.translate}};
    }
    PRISM_RETURN_IF_ERROR(write_file((fs::path(dir) / "generation_config.json").string(), g.dump(2)));
  }

  if (options.merge_config) {
    const fs::path config_path = fs::path(dir) / "config.json";
    PRISM_ASSIGN_OR_RETURN(json config, read_json_or_empty(config_path));
    const json fragment = {{"model_type", "whisper"},
                           {"vocab_size", ids.vocab_size},
                           {"num_mel_bins", options.num_mel_bins},
                           {"max_target_positions", options.max_target_positions},
                           {"decoder_start_token_id", ids.sot},
                           {"bos_token_id", ids.eot},
                           {"eos_token_id", ids.eot},
                           {"pad_token_id", ids.eot}};
    for (const auto& [key, value] : fragment.items())
      if (!config.contains(key)) config[key] = value;
    PRISM_RETURN_IF_ERROR(write_file(config_path.string(), config.dump(2)));
  }
  return ids;
}

}  // namespace prism::test
