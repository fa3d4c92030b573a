// engines/vad/vad_engine.h: the serving engine of task "vad": the Silero voice activity
// network (models/vad) over the windows of every request of a batch at once. A request is a
// piece of one stream (a long-form recording's next seconds, a live stream's new windows)
// with the stream's state (frontends/vad_payload.h); the engine keeps no stream between
// requests, so the deployment's dynamic batcher can put pieces of many streams in one forward.
// Deployment: model = the path of silero_vad.onnx. Shape: a step loop (serve()), as the
// generate engine's: a request's windows chain through the recurrent state, so a step takes
// the next block of every running request, and new requests join between steps.
// Series (labels deployment, modality "vad"): prism_vad_windows_total (windows scored),
// prism_vad_forward_windows (windows per forward) and prism_vad_forward_streams (requests
// whose windows shared a forward: above 1 when pieces of concurrent streams were batched).
// Must not: keep stream state, buffer audio, or decide speech spans (media/speech_spans.h).
#pragma once

#include "serving/engine.h"

namespace prism::engines::vad {

// Registers task "vad" (engine only: the payload needs no frontend).
void register_vad_engine(serving::EngineFactories& factories);

}  // namespace prism::engines::vad
