// engines/encode/embed_frontend.cpp: an embeddings deployment's tokenizer, limits, knobs and
// embedding space, read once from the model directory. No tensors, no model code.
#include "engines/encode/embed_frontend.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/file.h"
#include "base/log.h"
#include "formats/hf_config.h"

namespace prism::engines::encode {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 6> kKnownKnobs = {"pooling",       "normalize", "matryoshka_dims",
                                                         "search_index",  "packing",   "bulk_chunk_tokens"};

std::string join_ints(const std::vector<int64_t>& values) {
  std::string s;
  for (int64_t v : values) s += (s.empty() ? "" : ", ") + std::to_string(v);
  return s;
}

// The engine reads these; checking them here makes a bad value fail the deployment at once.
Status check_engine_knobs(const serving::Knobs& knobs) {
  PRISM_RETURN_IF_ERROR(knobs.get_bool("packing", true).status());
  PRISM_RETURN_IF_ERROR(knobs.get_string("search_index", "").status());
  PRISM_ASSIGN_OR_RETURN(int64_t chunk, knobs.get_int("bulk_chunk_tokens", 128));
  if (chunk < 1) return invalid_argument("knob 'bulk_chunk_tokens' must be >= 1, got " + std::to_string(chunk));
  return {};
}

// "768, 512,256" → {768, 512, 256}; an integer knob is a list of one.
Result<std::vector<int64_t>> parse_dims_list(const serving::Knobs& knobs) {
  const auto& values = knobs.values();
  const auto it = values.find("matryoshka_dims");
  if (const int64_t* one = std::get_if<int64_t>(&it->second)) return std::vector<int64_t>{*one};
  const std::string* text = std::get_if<std::string>(&it->second);
  if (text == nullptr) return invalid_argument("knob 'matryoshka_dims' must be a list like \"768,512,256\"");
  std::vector<int64_t> dims;
  size_t pos = 0;
  while (pos <= text->size()) {
    size_t end = text->find(',', pos);
    if (end == std::string::npos) end = text->size();
    std::string item = text->substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    char* stop = nullptr;
    const long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &stop, 10);
    if (item.empty() || *stop != '\0')
      return invalid_argument("knob 'matryoshka_dims': '" + item + "' is not an integer (want a list like \"768,512,256\")");
    dims.push_back(v);
    pos = end + 1;
  }
  return dims;
}

Result<std::vector<int64_t>> config_dims_list(const nlohmann::json& config, const std::string& origin) {
  const auto it = config.find("matryoshka_dimensions");
  if (it == config.end() || it->is_null()) return std::vector<int64_t>{};
  if (!it->is_array()) return invalid_argument(origin + ": \"matryoshka_dimensions\" must be an array of integers");
  std::vector<int64_t> dims;
  for (const auto& v : *it) {
    if (!v.is_number_integer())
      return invalid_argument(origin + ": \"matryoshka_dimensions\" must be an array of integers");
    dims.push_back(v.get<int64_t>());
  }
  return dims;
}

// Sorted largest first, each in [1, dims], no duplicates.
Result<std::vector<int64_t>> check_dims_list(std::vector<int64_t> list, int64_t dims, std::string_view where) {
  for (int64_t d : list)
    if (d < 1 || d > dims)
      return invalid_argument(std::string(where) + ": Matryoshka dimension " + std::to_string(d) +
                              " is outside 1.." + std::to_string(dims));
  std::sort(list.begin(), list.end(), std::greater<>());
  list.erase(std::unique(list.begin(), list.end()), list.end());
  return list;
}

// The weight files the model loads, in name order (what formats::WeightSource reads:
// model.safetensors when present, else the shards named by model.safetensors.index.json).
Result<std::vector<std::string>> weight_files(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::error_code ec;
  if (fs::is_regular_file(single, ec)) return std::vector<std::string>{single.string()};
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (!fs::is_regular_file(index, ec))
    return not_found("no model.safetensors or model.safetensors.index.json in '" + dir + "'");
  PRISM_ASSIGN_OR_RETURN(std::string text, read_file(index.string()));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    return invalid_argument(index.string() + ": no \"weight_map\" object");
  std::set<std::string> names;
  for (const auto& [tensor, file] : j["weight_map"].items()) {
    if (!file.is_string()) return invalid_argument(index.string() + ": weight_map values must be file names");
    names.insert(file.get<std::string>());
  }
  std::vector<std::string> paths;
  for (const std::string& n : names) paths.push_back((fs::path(dir) / n).string());
  return paths;
}

Status hash_file(XXH3_state_t* state, const std::string& path, int64_t& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found("cannot open '" + path + "'");
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<char> buf(size_t{4} << 20);
  Status status;
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      status = data_loss("reading '" + path + "' failed");
      break;
    }
    XXH3_128bits_update(state, buf.data(), size_t(n));
    bytes += n;
  }
  ::close(fd);
  return status;
}

// NOTE: the space id covers what decides a vector's value apart from precision: config.json
// as stored, the pooling and normalisation in effect (knobs included), and the weight bytes.
// Each part is preceded by a tag so that moving bytes between parts changes the hash.
Result<std::string> embedding_space_id(const std::string& dir, const std::string& config_bytes, Pooling pooling,
                                       bool normalize) {
  const auto start = std::chrono::steady_clock::now();
  PRISM_ASSIGN_OR_RETURN(std::vector<std::string> files, weight_files(dir));
  XXH3_state_t* state = XXH3_createState();
  PRISM_CHECK(state != nullptr);
  XXH3_128bits_reset(state);
  auto add = [&](std::string_view s) { XXH3_128bits_update(state, s.data(), s.size()); };
  add("prism-embedding-space-v1\nconfig.json\n");
  add(config_bytes);
  add("\npooling=" + std::string(models::pooling_name(pooling)) + "\nnormalize=" + (normalize ? "1" : "0") + "\n");
  int64_t bytes = 0;
  Status status;
  for (const std::string& f : files) {
    add("weights\n");
    status = hash_file(state, f, bytes);
    if (!status.ok()) break;
  }
  const XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  PRISM_RETURN_IF_ERROR(status);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, h);
  std::string hex;
  for (unsigned char c : canonical.digest) {
    char two[3];
    std::snprintf(two, sizeof two, "%02x", c);
    hex += two;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  PRISM_LOG_INFO("embedding space of '{}': {} ({} weight file(s), {:.1f} MB hashed in {:.1f} ms)", dir, hex,
                 files.size(), double(bytes) / 1e6, ms);
  return hex;
}

// Families whose position ids start after the padding index (HF's
// create_position_ids_from_input_ids): pad_token_id + 1 positions are never used by tokens.
bool has_position_offset(std::string_view model_type) {
  return model_type == "xlm-roberta" || model_type == "roberta" || model_type == "camembert";
}

Status length_error(size_t n, int64_t max_tokens) {
  return invalid_argument("has " + std::to_string(n) + " tokens, more than this model's maximum of " +
                          std::to_string(max_tokens) + " (set truncate to cut it)");
}

}  // namespace

Result<std::shared_ptr<const EmbedFrontend>> EmbedFrontend::load(const std::string& model_dir,
                                                                 const serving::Knobs& knobs) {
  PRISM_RETURN_IF_ERROR(knobs.check_names(kKnownKnobs, "an embed deployment"));
  PRISM_RETURN_IF_ERROR(check_engine_knobs(knobs));
  auto fe = std::make_shared<EmbedFrontend>();
  fe->model_dir_ = model_dir;
  fe->knobs_ = knobs;

  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  PRISM_ASSIGN_OR_RETURN(std::string config_bytes, read_file(config_path));
  PRISM_ASSIGN_OR_RETURN(formats::HfConfig config, formats::HfConfig::parse(config_bytes, config_path));
  PRISM_ASSIGN_OR_RETURN(fe->family_, config.get_string("model_type"));
  PRISM_ASSIGN_OR_RETURN(fe->dims_, config.get_int("hidden_size"));
  PRISM_ASSIGN_OR_RETURN(fe->vocab_size_, config.get_int("vocab_size"));
  PRISM_ASSIGN_OR_RETURN(int64_t max_positions, config.get_int("max_position_embeddings"));
  PRISM_ASSIGN_OR_RETURN(int64_t config_pad_id, config.get_int("pad_token_id", 0));
  fe->max_tokens_ = max_positions;
  if (has_position_offset(fe->family_)) fe->max_tokens_ -= config_pad_id + 1;
  // sentence-transformers cuts inputs at sentence_bert_config.json's max_seq_length (256 for
  // all-MiniLM-L6-v2, below its 512 positions): the model was trained and is judged there.
  const fs::path st_config = fs::path(model_dir) / "sentence_bert_config.json";
  if (fs::exists(st_config)) {
    PRISM_ASSIGN_OR_RETURN(std::string st_bytes, read_file(st_config.string()));
    const nlohmann::json st = nlohmann::json::parse(st_bytes, nullptr, /*allow_exceptions=*/false);
    if (!st.is_object()) return invalid_argument(st_config.string() + ": not a JSON object");
    if (st.contains("max_seq_length") && !st["max_seq_length"].is_null()) {
      if (!st["max_seq_length"].is_number_integer() || st["max_seq_length"].get<int64_t>() < 2)
        return invalid_argument(st_config.string() + ": max_seq_length must be an integer >= 2");
      fe->max_tokens_ = std::min(fe->max_tokens_, st["max_seq_length"].get<int64_t>());
    }
  }
  if (fe->dims_ < 1 || fe->vocab_size_ < 1 || fe->max_tokens_ < 2)
    return invalid_argument(config_path + ": hidden_size, vocab_size and max_position_embeddings must be positive "
                            "(and leave at least 2 positions)");

  // Matryoshka sizes: the knob wins over config.json.
  std::vector<int64_t> dims_list;
  std::string dims_origin;
  if (knobs.has("matryoshka_dims")) {
    PRISM_ASSIGN_OR_RETURN(dims_list, parse_dims_list(knobs));
    dims_origin = "knob 'matryoshka_dims'";
  } else {
    const nlohmann::json j = nlohmann::json::parse(config_bytes, nullptr, /*allow_exceptions=*/false);
    PRISM_ASSIGN_OR_RETURN(dims_list, config_dims_list(j, config_path));
    dims_origin = config_path;
  }
  PRISM_ASSIGN_OR_RETURN(fe->matryoshka_dims_, check_dims_list(std::move(dims_list), fe->dims_, dims_origin));

  // Pooling and normalisation: the sentence-transformers files, then the knobs.
  PRISM_ASSIGN_OR_RETURN(models::SentenceEmbeddingConfig st, models::read_sentence_embedding_config(model_dir));
  fe->pooling_ = st.pooling;
  fe->normalize_ = st.normalize;
  if (knobs.has("pooling")) {
    PRISM_ASSIGN_OR_RETURN(std::string name, knobs.get_string("pooling", ""));
    PRISM_ASSIGN_OR_RETURN(fe->pooling_, models::parse_pooling(name));
  }
  PRISM_ASSIGN_OR_RETURN(fe->normalize_, knobs.get_bool("normalize", fe->normalize_));

  // Our own copy of the tokenizer, with the file's truncation and padding removed: length
  // limits are ours (an error or an explicit truncate), and engines pad only when asked.
  PRISM_ASSIGN_OR_RETURN(fe->tokenizer_, text::Tokenizer::load(model_dir));
  const text::SpecialTokenIds& special = fe->tokenizer_.special_token_ids();
  if (fe->tokenizer_.padding()) fe->pad_id_ = fe->tokenizer_.padding()->pad_id;
  else if (special.pad) fe->pad_id_ = *special.pad;
  else fe->pad_id_ = int32_t(config_pad_id);
  if (fe->pad_id_ < 0 || fe->pad_id_ >= fe->vocab_size_) fe->pad_id_ = 0;
  fe->closing_id_ = special.sep ? special.sep : special.eos;
  fe->tokenizer_.set_truncation(std::nullopt);
  fe->tokenizer_.set_padding(std::nullopt);

  PRISM_ASSIGN_OR_RETURN(fe->space_id_, embedding_space_id(model_dir, config_bytes, fe->pooling_, fe->normalize_));
  PRISM_LOG_INFO("embed frontend '{}': family {}, dims {}, max tokens {}, pooling {}, normalize {}, Matryoshka [{}]",
                 model_dir, fe->family_, fe->dims_, fe->max_tokens_, models::pooling_name(fe->pooling_),
                 fe->normalize_, join_ints(fe->matryoshka_dims_));
  return std::shared_ptr<const EmbedFrontend>(std::move(fe));
}

Result<std::vector<int32_t>> EmbedFrontend::tokenize(std::string_view text, bool truncate) const {
  if (text.empty()) return invalid_argument("is empty");
  text::Encoding e = tokenizer_.encode(text, /*add_special_tokens=*/true);
  if (e.ids.empty()) return invalid_argument("has no tokens");
  if (int64_t(e.ids.size()) > max_tokens_) {
    if (!truncate) return length_error(e.ids.size(), max_tokens_);
    const bool keep_last = e.special_tokens_mask.back() != 0;
    const text::TokenId last = e.ids.back();
    e.ids.resize(size_t(max_tokens_));
    if (keep_last) e.ids.back() = last;
  }
  for (text::TokenId id : e.ids)
    if (id < 0 || id >= vocab_size_)
      return failed_precondition("the tokenizer gave id " + std::to_string(id) + ", outside this model's vocabulary of " +
                                 std::to_string(vocab_size_) + " ids");
  return std::move(e.ids);
}

Result<std::vector<int32_t>> EmbedFrontend::check_ids(std::span<const int64_t> ids, bool truncate) const {
  if (ids.empty()) return invalid_argument("is an empty token array");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size_)
      return invalid_argument("has token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              ", outside this model's vocabulary of " + std::to_string(vocab_size_) + " ids");
  size_t n = ids.size();
  if (int64_t(n) > max_tokens_) {
    if (!truncate) return length_error(n, max_tokens_);
    n = size_t(max_tokens_);
  }
  std::vector<int32_t> out(ids.begin(), ids.begin() + ptrdiff_t(n));
  if (n < ids.size() && closing_id_ && ids.back() == *closing_id_) out.back() = *closing_id_;
  return out;
}

Status EmbedFrontend::check_sequence(std::span<const int32_t> ids) const {
  if (ids.empty()) return invalid_argument("is an empty token array");
  if (int64_t(ids.size()) > max_tokens_) return length_error(ids.size(), max_tokens_);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size_)
      return invalid_argument("has token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                              ", outside this model's vocabulary of " + std::to_string(vocab_size_) + " ids");
  return {};
}

Status EmbedFrontend::check_dimensions(int64_t dims) const {
  if (dims == 0 || dims == dims_) return {};
  if (dims < 0) return invalid_argument("dimensions must be a positive integer, got " + std::to_string(dims));
  if (dims > dims_)
    return invalid_argument("dimensions " + std::to_string(dims) + " is more than this model's " +
                            std::to_string(dims_) + " dimensions");
  if (!matryoshka_dims_.empty() &&
      std::find(matryoshka_dims_.begin(), matryoshka_dims_.end(), dims) == matryoshka_dims_.end())
    return invalid_argument("dimensions " + std::to_string(dims) + " is not one of this model's Matryoshka sizes (" +
                            join_ints(matryoshka_dims_) + ")");
  return {};
}

}  // namespace prism::engines::encode
