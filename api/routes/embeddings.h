// api/routes/embeddings.h: OpenAI's embeddings route for deployments of task "embed".
//   POST /v1/embeddings  {"model", "input", "encoding_format"?: "float"|"base64",
//                         "dimensions"?: int, "user"?: string,
//                         "truncate"?: bool (TEI's name; default false), "priority"?: "online"|"bulk"}
//   → {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
//      "usage": {"prompt_tokens", "total_tokens"},
//      "prism": {"embedding_space", "dims", "normalized"}}
//      with header X-Prism-Embedding-Space: the same id.
// `input` is a string, an array of strings, an array of token ids, or an array of token-id
// arrays (at most kMaxEmbeddingInputs inputs). Texts are tokenized here, on the I/O thread,
// with the deployment's EmbedFrontend; the engine only sees checked token ids.
// Must not: block an I/O thread, or see tensors (the frontend and payload are plain data).
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
#include "engines/encode/embed_frontend.h"
#include "serving/deployment_set.h"

namespace prism::api {

// `deployments` is not owned and must outlive the server.
void add_embeddings_routes(Router& router, serving::DeploymentSet& deployments);

// ---- the route's pure steps, exposed for tests ----

inline constexpr std::size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request

// A request's `input` in the form the client sent: texts, or token ids (never both).
using EmbeddingInputs = TextOrTokens;

// Reads `input`: its form (one of the four, never mixed), non-empty strings and arrays, JSON
// integers for token ids, at most kMaxEmbeddingInputs inputs. invalid_argument whose message
// names the element ("input[3] is an empty string."). Vocabulary and length are checked later,
// by the model's frontend.
Result<EmbeddingInputs> parse_embedding_input(const nlohmann::json& input);

// Token ids of every input, special tokens included, checked by the frontend (vocabulary;
// length: invalid_argument giving the numbers unless `truncate`, then cut to max_tokens).
// The frontend's messages are predicates ("has 700 tokens, ..."): the error message puts the
// element's name before them ("input[3] has 700 tokens, ...").
Result<std::vector<std::vector<int32_t>>> tokenize_inputs(const EmbeddingInputs& inputs,
                                                          const engines::encode::EmbedFrontend& frontend,
                                                          bool truncate);

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
  int64_t prompt_tokens = 0;     // tokens of every input, after truncation
  std::string_view space_id;     // EmbedFrontend::space_id()
  bool normalized = false;       // vectors are unit length
};
std::string embeddings_json(const EmbeddingsReply& reply);

}  // namespace prism::api
