// engines/generate/generate_engine_factory.h: the generate engine's factory over an injected
// decoder loader, so tests (a fake decoder) and future tasks (the LM of a VLM) build the same
// engine. register_generate_engine (generate_engine.h) passes models::load_llama.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "models/decoder.h"
#include "runtime/ops.h"
#include "serving/config.h"
#include "serving/engine.h"

namespace prism::engines::generate {

// Builds a replica's decoder from the deployment (config.model is the model directory).
using DecoderLoader = std::function<Result<std::unique_ptr<models::Decoder>>(const serving::DeploymentConfig& config,
                                                                             ops::Precision precision)>;

// Engine factory for "chat" deployments over `loader`; the context's frontend must be a
// GenerateFrontend.
serving::EngineFactory generate_engine_factory(DecoderLoader loader);
// The frontend factory: GenerateFrontend::load(config).
serving::FrontendFactory generate_frontend_factory();

}  // namespace prism::engines::generate
