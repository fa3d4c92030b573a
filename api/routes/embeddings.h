// api/routes/embeddings.h: OpenAI's embeddings route for deployments of task "embed".
//   POST /v1/embeddings  {"model", "input", "encoding_format"?: "float"|"base64",
//                         "dimensions"?: int, "user"?: string,
//                         "truncate"?: bool (TEI's name; default false), "priority"?: "online"|"bulk"}
//   → {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
//      "usage": {"prompt_tokens", "total_tokens"},
//      "prism": {"embedding_space", "dims", "normalized", "images"?}}
//      with header X-Prism-Embedding-Space: the same id.
// `input` is a string, an array of strings, an array of token ids, or an array of token-id
// arrays (at most kMaxEmbeddingInputs inputs); for dual encoders (CLIP, SigLIP) an array may
// also hold image objects among its strings: {"type": "image_url", "image_url": {"url": URL}}
// (OpenAI's chat content part), {"type": "text", "text": ...}, or {"image": URL} (TEI's style).
// Texts are tokenized on the I/O thread and images read, decoded and preprocessed on a worker
// of the media pool (a full queue: 429), with the deployment's EmbedFrontend; the engine only
// sees checked token ids and pixel views.
// Must not: see tensors (the frontend and payload are plain data), or block an I/O thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/router.h"
#include "api/routes/text_or_tokens.h"
#include "base/status.h"
#include "frontends/embed_frontend.h"
#include "serving/deployment_set.h"
#include "serving/work_pool.h"

namespace prism::api {

// `deployments` is not owned and must outlive the server.
void add_embeddings_routes(Router& router, serving::DeploymentSet& deployments, serving::WorkPool& media_pool);

// ---- the route's pure steps, exposed for tests ----

inline constexpr std::size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request

// An image element of `input`: its position among the inputs and its URL (a data URL, a
// file:// path or an http(s) URL; the deployment's media policy decides later).
struct EmbeddingImage {
  std::size_t index = 0;
  std::string url;
};

// A request's `input` in the form the client sent: texts, or token ids (never both), and
// image elements among the texts.
struct EmbeddingInputs : TextOrTokens {
  std::vector<EmbeddingImage> images;  // by ascending index; the texts take the other positions

  std::size_t size() const { return TextOrTokens::size() + images.size(); }
  // The position of each text (or token array) among the inputs.
  std::vector<std::size_t> text_positions() const;
};

// Reads `input`: its form (one of the four, never mixed; or strings mixed with image objects),
// non-empty strings and arrays, JSON integers for token ids, non-empty image URLs, at most
// kMaxEmbeddingInputs inputs. invalid_argument whose message names the element ("input[3] is
// an empty string."). Vocabulary and length are checked later, by the model's frontend;
// whether the model takes images, by the route.
Result<EmbeddingInputs> parse_embedding_input(const nlohmann::json& input);

// Token ids of every text input, special tokens included, checked by the frontend
// (vocabulary; length: invalid_argument giving the numbers unless `truncate`, then cut to
// max_tokens), in order. The frontend's messages are predicates ("has 700 tokens, ..."): the
// error message puts the element's name before them ("input[3] has 700 tokens, ...").
Result<std::vector<std::vector<int32_t>>> tokenize_inputs(const EmbeddingInputs& inputs,
                                                          const frontends::EmbedFrontend& frontend,
                                                          bool truncate);

// Every image input read under the deployment's media policy, decoded and preprocessed by
// the frontend, with its position set. invalid_argument naming the element ("input[3] is a
// corrupt PNG image (...)", "input[1] is a file outside the allowed directory ..."), whatever
// the media layer's code was, except internal errors; failed_precondition ("... does not
// accept image input") when the model takes no images.
Result<std::vector<frontends::EmbedImage>> prepare_images(const EmbeddingInputs& inputs,
                                                                const frontends::EmbedFrontend& frontend);

// Appends the shortest decimal that reads back as exactly `value` (a float, so about 9
// significant digits at most rather than the 17 of a double); non-finite values as null.
void append_json_float(std::string& out, float value);

// OpenAI's encoding_format "base64": the little-endian float32 bytes, standard base64, padded.
std::string base64_float32(std::span<const float> values);

// What the response says, and the body it makes.
struct EmbeddingsReply {
  std::string_view model;        // as the client named it
  int64_t dims = 0;              // length of each vector
  std::span<const float> vectors;  // [inputs * dims] row-major, in input order
  bool base64 = false;           // encoding_format
  int64_t prompt_tokens = 0;     // tokens of every text input, after truncation
  std::string_view space_id;     // EmbedFrontend::space_id()
  bool normalized = false;       // vectors are unit length
  int64_t images = 0;            // image inputs; > 0 adds "images" to the prism object
};
std::string embeddings_json(const EmbeddingsReply& reply);

}  // namespace prism::api
