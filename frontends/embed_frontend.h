// frontends/embed_frontend.h: what an embeddings deployment knows before any replica
// runs: its tokenizer, limits, output dimensions and embedding space, and for dual encoders
// (CLIP, SigLIP) how images are read and preprocessed. Shared read-only by the api's I/O
// threads (which tokenize and decode images, in parallel, off the model's threads) and every
// replica. It holds no tensors: api/ includes this header without seeing runtime/ or models/; the
// family configs come from configs/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "configs/hf_config.h"
#include "configs/sentence_embedding.h"
#include "frontends/embed_payload.h"
#include "media/image.h"
#include "media/image_preprocess.h"
#include "media/media_source.h"
#include "serving/config.h"
#include "serving/engine.h"
#include "text/tokenizer.h"

namespace prism::formats {
class HfConfig;
}

namespace prism::frontends {

using configs::Pooling;

class EmbedFrontend final : public serving::Frontend {
 public:
  // model_dir: a Hugging Face directory of a supported encoder family: the BERT family, or a
  // CLIP / SigLIP dual encoder (config.json's model_type "clip" / "siglip"). Knobs it reads (invalid_argument
  // naming any other knob): pooling = "cls"|"mean"|"last_token" and normalize = bool
  // (override the model's own files; dual encoders pool the last token, always),
  // matryoshka_dims = "768,512,256" (overrides config.json's "matryoshka_dimensions"),
  // search_index = DIR (read by the search route), packing = bool, bulk_chunk_tokens = int,
  // max_encoder_views = int (images per image-tower call, default 8; read by the engine), and
  // the media policy of image inputs: allowed_local_media_dir = DIR, allowed_media_hosts =
  // "a.example.com,*.b.org", max_media_bytes = int, max_image_pixels = int (accepted by every
  // embed deployment; only dual encoders take images).
  static Result<std::shared_ptr<const EmbedFrontend>> load(const std::string& model_dir,
                                                           const serving::Knobs& knobs = {});

  // NOTE: the messages of tokenize() and check_ids() are predicates without a subject
  // ("has 700 tokens, more than this model's maximum of 512 (set truncate to cut it)", "is
  // empty"): the caller names the input ("input[3] " + message, "document 17 " + message).

  // Token ids of one text, special tokens included. Longer than max_tokens(): invalid_argument
  // that gives both numbers, unless `truncate` (then cut to max_tokens(), keeping the start
  // and the closing special token, e.g. [SEP] or </s>). Empty text: invalid_argument.
  // pads_to_max_tokens() models get the ids padded to max_tokens() with pad_id().
  Result<std::vector<int32_t>> tokenize(std::string_view text, bool truncate) const;
  // A token-array input, taken as given (no special tokens added), checked: non-empty, every
  // id in [0, vocab_size()), length as above. Truncation keeps the start, and the last id
  // when it is the tokenizer's closing special token. Padded as tokenize() pads.
  Result<std::vector<int32_t>> check_ids(std::span<const int64_t> ids, bool truncate) const;
  // The same checks on ids already narrowed (engines re-check payloads before the model).
  Status check_sequence(std::span<const int32_t> ids) const;

  // dims requested by a client (0: the model's). invalid_argument when negative, above
  // dims() (giving both numbers) or, for a model that declares its Matryoshka sizes, neither
  // dims() nor one of them (listing them). Dual encoders were not trained for shorter
  // vectors: without declared sizes they take dims() only.
  Status check_dimensions(int64_t dims) const;

  // ---- image inputs (dual encoders only) ----

  // True for CLIP / SigLIP: images are embedded into the texts' space.
  bool accepts_images() const { return accepts_images_; }
  // Reads `url` (a data URL, an allowed local file or an allowed host) under the deployment's
  // media policy, decodes it under its pixel limit and preprocesses it as the model's
  // preprocessor_config.json says: one view for the image tower, and its content key. Runs on
  // the api's I/O threads. Errors are predicates ("is a corrupt PNG image (...)"): the caller
  // names the input. `index` is left 0 for the caller to set. failed_precondition when the
  // model takes no images.
  Result<EmbedImage> prepare_image_url(std::string_view url) const;
  Result<EmbedImage> prepare_image(const media::Image& image) const;
  // The views an image of this model must have (the engine re-checks payloads).
  Status check_image(const EmbedImage& image) const;
  const media::ImageProcessorConfig& image_config() const { return image_config_; }
  const media::MediaSourcePolicy& media_policy() const { return media_policy_; }
  const media::ImageLimits& image_limits() const { return image_limits_; }
  int64_t image_size() const { return image_size_; }      // side of the tower's square input
  // Positions the image tower runs per image (patches, plus CLIP's class token): an image's
  // cost in a batch's token budget.
  int64_t image_tokens() const { return image_tokens_; }
  // SigLIP: every text is padded to max_tokens() with pad_id() and pooled at the last
  // position, as its HF processor does (padding="max_length": the model was trained so).
  bool pads_to_max_tokens() const { return pads_to_max_tokens_; }

  const std::string& model_dir() const { return model_dir_; }
  const std::string& family() const { return family_; }  // "bert", "xlm-roberta", "clip", "siglip", ...
  const text::Tokenizer& tokenizer() const { return tokenizer_; }
  // The longest input: max_position_embeddings (less the XLM-R offset), capped by
  // sentence_bert_config.json's max_seq_length when the model has one.
  int64_t max_tokens() const { return max_tokens_; }
  int64_t dims() const { return dims_; }
  int64_t vocab_size() const { return vocab_size_; }  // rows of the model's embedding table
  int32_t pad_id() const { return pad_id_; }          // fills padded slots (never attended)
  const std::vector<int64_t>& matryoshka_dims() const { return matryoshka_dims_; }  // empty: any <= dims
  Pooling pooling() const { return pooling_; }
  bool normalize() const { return normalize_; }
  // Hex XXH3-128 of the config, pooling, normalisation and weight bytes (both towers of a dual
  // encoder, and its preprocessor_config.json): vectors of two
  // deployments are comparable only when their space ids match. Precision is left out on
  // purpose: bf16/int8 vectors approximate the f32 ones of the same space. The weights
  // hashed are the files the model loads (model.safetensors, else the shards its index
  // names, in name order), so a stray *.safetensors beside them changes nothing.
  const std::string& space_id() const { return space_id_; }
  const serving::Knobs& knobs() const { return knobs_; }

 private:
  // The steps of load(): limits, dims and the model's own pooling of a BERT-family encoder
  // (config.json, sentence-transformers files) or of a dual encoder (text_config,
  // vision_config, preprocessor_config.json); then the knobs' pooling; then the tokenizer.
  Status read_encoder_config(const configs::HfConfig& config, const std::string& config_path, int64_t& config_pad_id);
  Status read_dual_encoder_config(const configs::HfConfig& config, const std::string& config_path,
                                  int64_t& config_pad_id);
  Status read_pooling(const serving::Knobs& knobs);
  Status load_tokenizer(int64_t config_pad_id);

  std::string model_dir_;
  std::string family_;
  text::Tokenizer tokenizer_;
  int64_t max_tokens_ = 0;
  int64_t dims_ = 0;
  int64_t vocab_size_ = 0;
  int32_t pad_id_ = 0;
  std::optional<text::TokenId> closing_id_;  // [SEP] or </s>: kept by truncation
  std::vector<int64_t> matryoshka_dims_;
  Pooling pooling_ = Pooling::mean;
  bool normalize_ = false;
  std::string space_id_;
  serving::Knobs knobs_;
  bool pads_to_max_tokens_ = false;
  // Dual encoders only.
  bool accepts_images_ = false;
  media::ImageProcessorConfig image_config_;
  media::MediaSourcePolicy media_policy_;
  media::ImageLimits image_limits_;
  int64_t image_size_ = 0;
  int64_t image_tokens_ = 0;
};

}  // namespace prism::frontends
