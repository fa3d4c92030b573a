// models/common/scratch_arena.h: the per-thread arena a decoder's forward pass keeps its
// intermediates in, one for every decoder family (Llama, Whisper). It must never hold a
// result: what a forward returns, and the residual stream it updates, live in the caller's
// arena.
#pragma once

#include "runtime/arena.h"

namespace prism::models::common {

// NOTE: a forward's intermediates live in this arena, reset at every layer, so memory is one
// layer's worth whatever the depth and a steady state allocates nothing. The residual stream
// (updated in place), the gathered rows and the logits go to the caller's arena (the
// engine's step arena, or the heap), which outlives the call. Per thread, not per model, so
// models stay const and shareable; a forward leaves nothing here that a later one (of any
// model on this thread) could still need, so each may reset it.
Arena& scratch_arena();

}  // namespace prism::models::common
