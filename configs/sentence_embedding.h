// configs/sentence_embedding.h: how a model directory says to turn token states into one
// vector, as sentence-transformers lays it out: modules.json lists the modules in order
// (Transformer, Pooling at "1_Pooling", optionally Normalize), and the Pooling module's
// config.json picks the mode. Configuration only, no tensors (api/ sees this through
// frontends/embed_frontend.h); the pooling arithmetic is models/pooling.h.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace prism::configs {

enum class Pooling { cls, mean, last_token };
std::string_view pooling_name(Pooling p);            // "cls", "mean", "last_token"
Result<Pooling> parse_pooling(std::string_view name);  // invalid_argument listing the names

struct SentenceEmbeddingConfig {
  Pooling pooling = Pooling::mean;
  bool normalize = false;  // a sentence_transformers.models.Normalize module follows pooling
  std::string source;      // where it came from, for logs: "1_Pooling/config.json" or a default
};

// Reads modules.json and its Pooling module's config.json (pooling_mode_cls_token,
// pooling_mode_mean_tokens, pooling_mode_lasttoken; another mode set, or several, is
// unimplemented naming it). A module other than Transformer, Pooling and Normalize (Dense,
// ...) is unimplemented naming it: it would change the vectors. Without modules.json: mean
// pooling, no normalisation — what sentence-transformers does when it wraps a plain Hugging
// Face encoder. Malformed files are invalid_argument naming them; a Pooling config.json that
// modules.json names but that is missing is not_found.
Result<SentenceEmbeddingConfig> read_sentence_embedding_config(const std::string& model_dir);

}  // namespace prism::configs
