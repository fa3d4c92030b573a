// frontends/embed_frontend.cpp: an embeddings deployment's tokenizer, limits, knobs and
// embedding space, read once from the model directory, and for dual encoders the reading and
// preprocessing of image inputs. No tensors, no model code.
#include "frontends/embed_frontend.h"

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
#include "configs/hf_config.h"
#include "media/media_key.h"

namespace prism::frontends {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 11> kKnownKnobs = {
    "pooling",           "normalize",         "matryoshka_dims",         "search_index",
    "packing",           "bulk_chunk_tokens", "max_encoder_views",       "allowed_local_media_dir",
    "allowed_media_hosts", "max_media_bytes", "max_image_pixels"};

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
  PRISM_ASSIGN_OR_RETURN(int64_t views, knobs.get_int("max_encoder_views", 8));
  if (views < 1) return invalid_argument(knobs.where("max_encoder_views") + " must be >= 1, got " + std::to_string(views));
  return {};
}

// "a.example.com, *.b.org" → {"a.example.com", "*.b.org"}.
std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) items.push_back(std::move(item));
    pos = end + 1;
  }
  return items;
}

// The media policy knobs (the names the chat deployments use for the same policy).
Status read_media_knobs(const serving::Knobs& knobs, media::MediaSourcePolicy& policy, media::ImageLimits& limits) {
  PRISM_ASSIGN_OR_RETURN(policy.allowed_local_dir, knobs.get_string("allowed_local_media_dir", ""));
  PRISM_ASSIGN_OR_RETURN(std::string hosts, knobs.get_string("allowed_media_hosts", ""));
  policy.allowed_hosts = split_list(hosts);
  PRISM_ASSIGN_OR_RETURN(policy.max_bytes, knobs.get_int("max_media_bytes", policy.max_bytes));
  if (policy.max_bytes < 1) return invalid_argument(knobs.where("max_media_bytes") + " must be >= 1");
  limits.max_bytes = policy.max_bytes;
  PRISM_ASSIGN_OR_RETURN(limits.max_pixels, knobs.get_int("max_image_pixels", limits.max_pixels));
  if (limits.max_pixels < 1) return invalid_argument(knobs.where("max_image_pixels") + " must be >= 1");
  return {};
}

bool has_media_knob(const serving::Knobs& knobs) {
  for (std::string_view k : {"allowed_local_media_dir", "allowed_media_hosts", "max_media_bytes", "max_image_pixels",
                             "max_encoder_views"})
    if (knobs.has(k)) return true;
  return false;
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
                                       bool normalize, const std::string* preprocessor_bytes) {
  const auto start = std::chrono::steady_clock::now();
  PRISM_ASSIGN_OR_RETURN(std::vector<std::string> files, weight_files(dir));
  XXH3_state_t* state = XXH3_createState();
  PRISM_CHECK(state != nullptr);
  XXH3_128bits_reset(state);
  auto add = [&](std::string_view s) { XXH3_128bits_update(state, s.data(), s.size()); };
  add("prism-embedding-space-v1\nconfig.json\n");
  add(config_bytes);
  add("\npooling=" + std::string(configs::pooling_name(pooling)) + "\nnormalize=" + (normalize ? "1" : "0") + "\n");
  if (preprocessor_bytes != nullptr) {  // dual encoders: how images are prepared changes their vectors
    add("preprocessor_config.json\n");
    add(*preprocessor_bytes);
    add("\n");
  }
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
  PRISM_RETURN_IF_ERROR(read_media_knobs(knobs, fe->media_policy_, fe->image_limits_));

  const std::string config_path = (fs::path(model_dir) / "config.json").string();
  PRISM_ASSIGN_OR_RETURN(std::string config_bytes, read_file(config_path));
  PRISM_ASSIGN_OR_RETURN(configs::HfConfig config, configs::HfConfig::parse(config_bytes, config_path));
  PRISM_ASSIGN_OR_RETURN(fe->family_, config.get_string("model_type"));
  int64_t config_pad_id = 0;
  std::string preprocessor_bytes;
  // NOTE: config.json is parsed once, here; the dual encoders are models/vision/dual_encoder.h's.
  if (fe->family_ == "clip" || fe->family_ == "siglip") {
    PRISM_RETURN_IF_ERROR(fe->read_dual_encoder_config(config, config_path, config_pad_id));
    PRISM_ASSIGN_OR_RETURN(preprocessor_bytes, read_file((fs::path(model_dir) / "preprocessor_config.json").string()));
  } else {
    PRISM_RETURN_IF_ERROR(fe->read_encoder_config(config, config_path, config_pad_id));
    if (has_media_knob(knobs))
      PRISM_LOG_WARN("embed deployment '{}': media knobs are set, but a {} model takes no images", model_dir,
                     fe->family_);
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
    PRISM_ASSIGN_OR_RETURN(dims_list, config_dims_list(config.object(), config_path));
    dims_origin = config_path;
  }
  PRISM_ASSIGN_OR_RETURN(fe->matryoshka_dims_, check_dims_list(std::move(dims_list), fe->dims_, dims_origin));

  PRISM_RETURN_IF_ERROR(fe->read_pooling(knobs));
  PRISM_RETURN_IF_ERROR(fe->load_tokenizer(config_pad_id));

  PRISM_ASSIGN_OR_RETURN(fe->space_id_,
                         embedding_space_id(model_dir, config_bytes, fe->pooling_, fe->normalize_,
                                            fe->accepts_images_ ? &preprocessor_bytes : nullptr));
  PRISM_LOG_INFO("embed frontend '{}': family {}, dims {}, max tokens {}, pooling {}, normalize {}, Matryoshka [{}]{}",
                 model_dir, fe->family_, fe->dims_, fe->max_tokens_, configs::pooling_name(fe->pooling_),
                 fe->normalize_, join_ints(fe->matryoshka_dims_),
                 fe->accepts_images_ ? ", images of " + std::to_string(fe->image_size_) + " px" : std::string());
  return std::shared_ptr<const EmbedFrontend>(std::move(fe));
}

Status EmbedFrontend::read_encoder_config(const configs::HfConfig& config, const std::string& config_path,
                                          int64_t& config_pad_id) {
  PRISM_ASSIGN_OR_RETURN(dims_, config.get_int("hidden_size"));
  PRISM_ASSIGN_OR_RETURN(vocab_size_, config.get_int("vocab_size"));
  PRISM_ASSIGN_OR_RETURN(int64_t max_positions, config.get_int("max_position_embeddings"));
  PRISM_ASSIGN_OR_RETURN(config_pad_id, config.get_int("pad_token_id", 0));
  max_tokens_ = max_positions;
  if (has_position_offset(family_)) max_tokens_ -= config_pad_id + 1;
  // sentence-transformers cuts inputs at sentence_bert_config.json's max_seq_length (256 for
  // all-MiniLM-L6-v2, below its 512 positions): the model was trained and is judged there.
  const fs::path st_config = fs::path(model_dir_) / "sentence_bert_config.json";
  if (fs::exists(st_config)) {
    PRISM_ASSIGN_OR_RETURN(std::string st_bytes, read_file(st_config.string()));
    const nlohmann::json st = nlohmann::json::parse(st_bytes, nullptr, /*allow_exceptions=*/false);
    if (!st.is_object()) return invalid_argument(st_config.string() + ": not a JSON object");
    if (st.contains("max_seq_length") && !st["max_seq_length"].is_null()) {
      if (!st["max_seq_length"].is_number_integer() || st["max_seq_length"].get<int64_t>() < 2)
        return invalid_argument(st_config.string() + ": max_seq_length must be an integer >= 2");
      max_tokens_ = std::min(max_tokens_, st["max_seq_length"].get<int64_t>());
    }
  }
  // Pooling and normalisation: the sentence-transformers files (knobs come after).
  PRISM_ASSIGN_OR_RETURN(configs::SentenceEmbeddingConfig st, configs::read_sentence_embedding_config(model_dir_));
  pooling_ = st.pooling;
  normalize_ = st.normalize;
  return {};
}

// NOTE: the defaults are transformers' CLIPTextConfig / SiglipTextConfig / *VisionConfig
// ones: checkpoints saved by recent versions leave keys at their default out of config.json
// (google/siglip-base-patch16-224 has no max_position_embeddings: 64).
Status EmbedFrontend::read_dual_encoder_config(const configs::HfConfig& config, const std::string& config_path,
                                               int64_t& config_pad_id) {
  const bool clip = family_ == "clip";
  Result<configs::HfConfig> text = config.get_object("text_config");
  Result<configs::HfConfig> vision = config.get_object("vision_config");
  if (!text.has_value() || !vision.has_value())
    return invalid_argument(config_path + ": a " + family_ + " dual encoder needs \"text_config\" and \"vision_config\"");
  PRISM_ASSIGN_OR_RETURN(vocab_size_, text->get_int("vocab_size", clip ? 49408 : 32000));
  PRISM_ASSIGN_OR_RETURN(max_tokens_, text->get_int("max_position_embeddings", clip ? 77 : 64));
  PRISM_ASSIGN_OR_RETURN(config_pad_id, text->get_int("pad_token_id", 1));
  if (clip) {
    PRISM_ASSIGN_OR_RETURN(dims_, config.get_int("projection_dim", 512));
  } else {
    PRISM_ASSIGN_OR_RETURN(dims_, text->get_int("hidden_size", 768));
  }
  PRISM_ASSIGN_OR_RETURN(image_size_, vision->get_int("image_size", 224));
  PRISM_ASSIGN_OR_RETURN(int64_t patch_size, vision->get_int("patch_size", clip ? 32 : 16));
  if (image_size_ < 1 || patch_size < 1 || image_size_ % patch_size != 0)
    return invalid_argument(config_path + ": vision_config image_size " + std::to_string(image_size_) +
                            " must be a positive multiple of patch_size " + std::to_string(patch_size));
  const int64_t grid = image_size_ / patch_size;
  image_tokens_ = grid * grid + (clip ? 1 : 0);  // CLIP's class token
  pooling_ = Pooling::last_token;  // CLIP: the end-of-text token; SigLIP: the last (padded) position
  normalize_ = true;               // both compare unit vectors (cosine logits)
  pads_to_max_tokens_ = !clip;

  PRISM_ASSIGN_OR_RETURN(image_config_, media::ImageProcessorConfig::load(model_dir_));
  if (image_config_.kind == media::ProcessorKind::idefics3)
    return invalid_argument(model_dir_ + "/preprocessor_config.json: a dual encoder needs a CLIP or SigLIP image "
                            "processor (one view per image), not Idefics3's");
  // What the processor makes of any image must be exactly the tower's input.
  media::Image probe;
  probe.width = 3;
  probe.height = 2;
  probe.pixels.assign(size_t(probe.num_pixels()) * 3, 128);
  const media::PixelViews views = media::preprocess_image(probe, image_config_);
  if (views.num_views != 1 || views.side != image_size_)
    return invalid_argument(model_dir_ + "/preprocessor_config.json: makes " + std::to_string(views.num_views) +
                            " view(s) of " + std::to_string(views.side) + " px, but the image tower takes one of " +
                            std::to_string(image_size_) + " px");
  accepts_images_ = true;
  return {};
}

Status EmbedFrontend::read_pooling(const serving::Knobs& knobs) {
  if (knobs.has("pooling")) {
    PRISM_ASSIGN_OR_RETURN(std::string name, knobs.get_string("pooling", ""));
    PRISM_ASSIGN_OR_RETURN(Pooling pooling, configs::parse_pooling(name));
    if (accepts_images_ && pooling != Pooling::last_token)
      return invalid_argument(knobs.where("pooling") + ": a " + family_ +
                              " dual encoder pools its text at the last token; it cannot be '" + name + "'");
    pooling_ = pooling;
  }
  PRISM_ASSIGN_OR_RETURN(normalize_, knobs.get_bool("normalize", normalize_));
  return {};
}

// Our own copy of the tokenizer, with the file's truncation and padding removed: length
// limits are ours (an error or an explicit truncate), and engines pad only when asked.
Status EmbedFrontend::load_tokenizer(int64_t config_pad_id) {
  Result<text::Tokenizer> tokenizer = text::Tokenizer::load(model_dir_);
  // SigLIP checkpoints ship their SentencePiece model as spiece.model, not tokenizer.model.
  const fs::path spiece = fs::path(model_dir_) / "spiece.model";
  if (!tokenizer.has_value() && accepts_images_ && fs::exists(spiece)) tokenizer = text::Tokenizer::load(spiece.string());
  PRISM_ASSIGN_OR_RETURN(tokenizer_, std::move(tokenizer));
  const text::SpecialTokenIds& special = tokenizer_.special_token_ids();
  // NOTE: SigLIP's padded positions are real input (no attention mask), so its pad id
  // matters: the tokenizer's padding when it declares one, else text_config.pad_token_id (1,
  // "</s>", in the real checkpoints). Other models never attend to padding.
  if (tokenizer_.padding()) pad_id_ = tokenizer_.padding()->pad_id;
  else if (special.pad && !accepts_images_) pad_id_ = *special.pad;
  else pad_id_ = int32_t(config_pad_id);
  if (pad_id_ < 0 || pad_id_ >= vocab_size_) pad_id_ = 0;
  closing_id_ = special.sep ? special.sep : special.eos;
  tokenizer_.set_truncation(std::nullopt);
  tokenizer_.set_padding(std::nullopt);
  return {};
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
  if (pads_to_max_tokens_) e.ids.resize(size_t(max_tokens_), pad_id_);
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
  if (pads_to_max_tokens_) out.resize(size_t(max_tokens_), pad_id_);
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
  if (accepts_images_ && matryoshka_dims_.empty())
    return invalid_argument("dimensions " + std::to_string(dims) + ": this " + family_ + " model's vectors are " +
                            std::to_string(dims_) + " long and cannot be shortened (it was not trained for "
                            "Matryoshka sizes; a deployment may declare some with the knob matryoshka_dims)");
  if (!matryoshka_dims_.empty() &&
      std::find(matryoshka_dims_.begin(), matryoshka_dims_.end(), dims) == matryoshka_dims_.end())
    return invalid_argument("dimensions " + std::to_string(dims) + " is not one of this model's Matryoshka sizes (" +
                            join_ints(matryoshka_dims_) + ")");
  return {};
}

Result<EmbedImage> EmbedFrontend::prepare_image_url(std::string_view url) const {
  if (!accepts_images_) return failed_precondition("is an image, but this " + family_ + " model takes no images");
  PRISM_ASSIGN_OR_RETURN(media::MediaBytes bytes, media::read_media_url(url, media_policy_));
  PRISM_ASSIGN_OR_RETURN(media::Image image, media::decode_image(bytes.bytes, image_limits_));
  return prepare_image(image);
}

// NOTE: the key hashes the tower's input itself (the preprocessed view), so everything that
// shapes it (pixels, resize, crop, normalisation) is covered by construction; the engine
// names the model and precision in the cache's encoder id.
Result<EmbedImage> EmbedFrontend::prepare_image(const media::Image& image) const {
  if (!accepts_images_) return failed_precondition("is an image, but this " + family_ + " model takes no images");
  if (image.width < 1 || image.height < 1 || image.pixels.size() != size_t(image.num_pixels()) * 3)
    return invalid_argument("is an empty or malformed image");
  auto views = std::make_shared<media::PixelViews>(media::preprocess_image(image, image_config_));
  media::MediaKeyBuilder key;
  key.add(std::string_view("prism-embed-image-v1"));
  key.add(int64_t(views->side)).add(int64_t(views->num_views));
  key.add(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(views->values.data()),
                                   views->values.size() * sizeof(float)));
  EmbedImage out;
  out.key = key.finish();
  out.views = std::move(views);
  return out;
}

Status EmbedFrontend::check_image(const EmbedImage& image) const {
  if (!accepts_images_) return failed_precondition("is an image, but this " + family_ + " model takes no images");
  const media::PixelViews* v = image.views.get();
  if (v == nullptr || v->num_views != 1 || v->side != image_size_ ||
      v->values.size() != size_t(3) * size_t(image_size_) * size_t(image_size_))
    return invalid_argument("is not one preprocessed view of " + std::to_string(image_size_) + " px");
  return {};
}

}  // namespace prism::frontends
