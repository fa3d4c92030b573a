// engines/generate/generate_engine_factory.h: the generate engine's factory over injected
// loaders (the decoder; for vision-language models, the media encoder; for speech models, the
// speech encoder), so tests (fakes) and the real families build the same engine.
// register_generate_engine (generate_engine.h) passes models::load_llama /
// models::load_vlm_language_model and load_vlm_media_encoder ("chat"), and
// models::load_whisper_decoder and load_whisper_encoder ("transcribe").
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "models/decoder.h"
#include "models/media_encoder.h"
#include "models/speech_encoder.h"
#include "runtime/ops.h"
#include "serving/config.h"
#include "serving/engine.h"

namespace prism::engines::generate {

// Builds a replica's decoder from the deployment (config.model is the model directory).
using DecoderLoader = std::function<Result<std::unique_ptr<models::Decoder>>(const serving::DeploymentConfig& config,
                                                                             ops::Precision precision)>;

// Builds a replica's media encoder (the vision tower and projector of a VLM).
using MediaEncoderLoader = std::function<Result<std::unique_ptr<models::MediaEncoder>>(
    const serving::DeploymentConfig& config, ops::Precision precision)>;

// Builds a replica's speech encoder (Whisper's encoder and its decoder's cross K/V projections).
using SpeechEncoderLoader = std::function<Result<std::unique_ptr<models::SpeechEncoder>>(
    const serving::DeploymentConfig& config, ops::Precision precision)>;

// Engine factory for "chat" and "transcribe" deployments over `loader`; the context's
// frontend must be a GenerateFrontend. The engine calls media_loader only when the frontend
// has a vision() processor (a VLM), speech_loader only when it has a speech() processor (an
// encoder-decoder speech model), and then needs the one it calls.
serving::EngineFactory generate_engine_factory(DecoderLoader loader, MediaEncoderLoader media_loader = {},
                                               SpeechEncoderLoader speech_loader = {});
// The frontend factory: GenerateFrontend::load(config).
serving::FrontendFactory generate_frontend_factory();

}  // namespace prism::engines::generate
