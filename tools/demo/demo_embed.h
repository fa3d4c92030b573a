// tools/demo/demo_embed.h: the demo embedding model, "demo-embed": a tiny BERT encoder with random
// weights (fixed seed) in the sentence-transformers layout of all-MiniLM-L6-v2 (config.json
// with BERT keys, model.safetensors with BertModel names, modules.json, mean pooling in
// 1_Pooling/config.json, a 2_Normalize module) and a WordPiece tokenizer.json over a small
// English vocabulary. It shows the embeddings path end to end; its vectors are meaningless.
#pragma once

#include <filesystem>

#include "base/status.h"

namespace prism::tools::demo {

// Writes the checkpoint into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_embed(const std::filesystem::path& dir);

}  // namespace prism::tools::demo
