// engines/generate/register_generate_engine.cpp: task "chat" = GenerateFrontend + the generate
// engine over models/llama. Apart from generate_engine.cpp so that a test linking the engine
// over a fake decoder does not pull in the model code.
#include "engines/generate/generate_engine.h"
#include "engines/generate/generate_engine_factory.h"
#include "models/llama/llama.h"

namespace prism::engines::generate {

void register_generate_engine(serving::EngineFactories& factories) {
  DecoderLoader loader = [](const serving::DeploymentConfig& config,
                            ops::Precision precision) -> Result<std::unique_ptr<models::Decoder>> {
    return models::load_llama(config.model, precision);
  };
  factories.add("chat", serving::EngineKind(generate_engine_factory(std::move(loader)), generate_frontend_factory()));
}

}  // namespace prism::engines::generate
