// engines/generate/generate_engine.h: the autoregressive engine (task "chat"). One engine per
// replica runs the continuous-batching loop: admit waiting requests between steps, schedule
// a step under the token budget (decodes first, then chunks of prefills), run the decoder
// once over the flat batch, sample, stream, retire finished sequences, preempt (by
// recompute) when the KV cache is full. Knobs: docs/configuration.md "chat".
#pragma once

#include "serving/engine.h"

namespace prism::engines::generate {

// Registers task "chat": GenerateFrontend + GenerateEngine over models/llama.
void register_generate_engine(serving::EngineFactories& factories);

}  // namespace prism::engines::generate
