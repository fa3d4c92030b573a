// tools/demo/demo_chat.h: the demo chat model, "demo-chat": a tiny Llama (hidden 64, 2 layers, 4
// heads, 2 KV heads, tied embeddings) with random weights (fixed seed) under LlamaForCausalLM's
// Hugging Face names and config keys, a byte-level BPE tokenizer.json (256 byte tokens, a few
// hundred merges of common English words, ChatML special tokens), a ChatML chat template and
// generation_config.json. It shows the chat path end to end; its replies are babble, shaped
// (see demo_chat.cpp) to be readable words: greedy replies run until max_tokens, sampled ones
// (temperature 1) end after a few hundred tokens on average.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::tools::demo {

// Writes the checkpoint into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_chat(const std::filesystem::path& dir);

// demo-chat's language model, for demos built on it (demo-vlm): its byte-level BPE with
// `added_specials` appended as added special tokens (ids from the BPE vocabulary's size on, in
// order; embedded as special tokens, so the babble stays readable), and the Llama for that
// vocabulary. Same values on every run.
struct DemoLanguageModel {
  nlohmann::ordered_json tokenizer;  // tokenizer.json
  nlohmann::ordered_json config;     // LlamaForCausalLM's config.json keys (a VLM's text_config)
  // The Llama's tensors, LlamaForCausalLM's names with "model." replaced by the prefix asked
  // for; the LM head is tied (no lm_head.weight).
  std::vector<std::pair<std::string, Tensor>> weights;
  int64_t vocab_size = 0;  // added tokens included
};
DemoLanguageModel demo_language_model(const std::vector<std::string>& added_specials, const std::string& prefix);

// The [[deployment]] lines of demo-chat in the demo prism.toml: small KV knobs.
inline constexpr const char* kDemoChatToml =
    "[deployment.knobs]\n"
    "kv_cache_bytes = 16777216\n"
    "prefix_caching = true\n";

}  // namespace prism::tools::demo
