// engines/encode/embed_engine.h: the serving engine of task "embed": one per replica, on its
// replica's thread. Online requests run as soon as they are taken; bulk requests are cut into
// chunks of bulk_chunk_tokens, and between chunks the engine picks up what waits, so a bulk
// job never holds an online query back longer than one chunk. Dual encoders (CLIP, SigLIP)
// take images too: the texts and the images of a batch both run, each through its tower.
// It must not: tokenize or decode images (the api's I/O threads do), see HTTP, or start threads.
#pragma once

#include <functional>
#include <memory>

#include "base/status.h"
#include "models/encoder.h"
#include "models/vision/dual_encoder.h"
#include "runtime/ops.h"
#include "serving/engine.h"

namespace prism::frontends {
class EmbedFrontend;
}

namespace prism::engines::encode {

// Builds a replica's encoder. Default: models::load_bert(frontend.model_dir(), precision).
using EncoderLoader =
    std::function<Result<std::unique_ptr<models::Encoder>>(const frontends::EmbedFrontend& frontend, ops::Precision precision)>;

// The models of a replica: the text encoder, and the image tower of a dual encoder.
struct EmbedModels {
  std::unique_ptr<models::Encoder> text;
  std::unique_ptr<models::ImageEmbedder> image;  // null for text-only models
};
// Builds them. Default: models::load_dual_encoder for CLIP / SigLIP, else load_bert.
using EmbedModelsLoader =
    std::function<Result<EmbedModels>(const frontends::EmbedFrontend& frontend, ops::Precision precision)>;

// Engine factory for "embed" deployments; `loader` null means the default loaders (tests pass
// fakes). The EncoderLoader form is for text-only models.
serving::EngineFactory embed_engine_factory(EncoderLoader loader = nullptr);
serving::EngineFactory embed_engine_factory(EmbedModelsLoader loader);
// The frontend factory: EmbedFrontend::load(config.model, config.knobs).
serving::FrontendFactory embed_frontend_factory();
// Registers task "embed" (engine + frontend).
void register_embed_engine(serving::EngineFactories& factories);

}  // namespace prism::engines::encode
