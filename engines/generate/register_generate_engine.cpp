// engines/generate/register_generate_engine.cpp: task "chat" = GenerateFrontend + the generate
// engine over models/llama, or over the two halves of a vision-language model (models/vlm);
// task "transcribe" = the same frontend (with its SpeechProcessor) and engine over the two
// halves of Whisper (models/whisper).
// Apart from generate_engine.cpp so that a test linking the engine over fakes does not pull in
// the model code.
#include "engines/generate/generate_engine.h"
#include "engines/generate/generate_engine_factory.h"
#include "models/llama/llama.h"
#include "models/vlm/vision_language.h"
#include "models/whisper/whisper.h"

namespace prism::engines::generate {

void register_generate_engine(serving::EngineFactories& factories) {
  DecoderLoader loader = [](const serving::DeploymentConfig& config,
                            ops::Precision precision) -> Result<std::unique_ptr<models::Decoder>> {
    if (models::is_vision_language_model(config.model))
      return models::load_vlm_language_model(config.model, precision);
    return models::load_llama(config.model, precision);
  };
  MediaEncoderLoader media_loader = [](const serving::DeploymentConfig& config,
                                       ops::Precision precision) -> Result<std::unique_ptr<models::MediaEncoder>> {
    return models::load_vlm_media_encoder(config.model, precision);
  };
  factories.add("chat", serving::EngineKind(generate_engine_factory(std::move(loader), std::move(media_loader)),
                                            generate_frontend_factory()));

  DecoderLoader whisper_decoder = [](const serving::DeploymentConfig& config,
                                     ops::Precision precision) -> Result<std::unique_ptr<models::Decoder>> {
    return models::load_whisper_decoder(config.model, precision);
  };
  SpeechEncoderLoader whisper_encoder = [](const serving::DeploymentConfig& config,
                                           ops::Precision precision) -> Result<std::unique_ptr<models::SpeechEncoder>> {
    return models::load_whisper_encoder(config.model, precision);
  };
  factories.add("transcribe",
                serving::EngineKind(generate_engine_factory(std::move(whisper_decoder), {}, std::move(whisper_encoder)),
                                    generate_frontend_factory()));
}

}  // namespace prism::engines::generate
