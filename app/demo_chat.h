// app/demo_chat.h: the demo chat model, "demo-chat": a tiny Llama (hidden 64, 2 layers, 4
// heads, 2 KV heads, tied embeddings) with random weights (fixed seed) under LlamaForCausalLM's
// Hugging Face names and config keys, a byte-level BPE tokenizer.json (256 byte tokens, a few
// hundred merges of common English words, ChatML special tokens), a ChatML chat template and
// generation_config.json. It shows the chat path end to end; its replies are babble, shaped
// (see demo_chat.cpp) to be readable words: greedy replies run until max_tokens, sampled ones
// (temperature 1) end after a few hundred tokens on average.
#pragma once

#include <filesystem>

#include "base/status.h"

namespace prism::app {

// Writes the checkpoint into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_chat(const std::filesystem::path& dir);

// The [[deployment]] lines of demo-chat in the demo prism.toml: small KV knobs.
inline constexpr const char* kDemoChatToml =
    "[deployment.knobs]\n"
    "kv_cache_bytes = 16777216\n"
    "prefix_caching = true\n";

}  // namespace prism::app
