// tools/demo/demo_asr.h: the demo speech-recognition model, "demo-asr": a tiny Whisper (d_model 64,
// 2 encoder + 2 decoder layers, 4 heads, 80 mel bins, 1500 source positions, 64 target
// positions, so a chunk decodes at most 32 tokens) with random weights (fixed seed) under
// WhisperForConditionalGeneration's Hugging Face names and config keys; demo-chat's byte-level
// BPE with Whisper's special tokens appended in the real order (<|endoftext|>,
// <|startoftranscript|>, the 99 language tokens, <|translate|>, <|transcribe|>,
// <|startoflm|>, <|startofprev|>, <|nospeech|>, <|notimestamps|>, <|0.00|>..<|30.00|>);
// generation_config.json (suppress tokens, begin_suppress_tokens, lang_to_id, task_to_id,
// no_timestamps_token_id, max_initial_timestamp_index, is_multilingual) and a
// WhisperFeatureExtractor preprocessor_config.json. It shows the speech path end to end
// (/v1/audio/transcriptions and /translations, the Realtime WebSocket, `prism transcribe`);
// its transcripts are babble shaped (demo_asr.cpp) into English words with timestamps: the
// language detected is English, the segments' times grow through the chunk, and greedy
// decodes pass Whisper's quality checks, so chunks are not re-run.
#pragma once

#include <filesystem>

#include "base/status.h"

namespace prism::tools::demo {

// Writes the checkpoint into dir (an empty folder). Same bytes on every run and machine.
Status write_demo_asr(const std::filesystem::path& dir);

// The [[deployment]] lines of demo-asr in the demo prism.toml: small KV knobs, the built-in
// energy VAD (no model file), a batch of 8 sequences (a long file's chunks fill it and wait
// in the transcription, so a short file's chunk takes the next free slot).
inline constexpr const char* kDemoAsrToml =
    "[deployment.knobs]\n"
    "kv_cache_bytes = 8388608\n"
    "vad = \"energy\"\n"
    "[deployment.batching]\n"
    "max_batch_size = 8\n";

}  // namespace prism::tools::demo
