// app/engines.cpp: the one registration of the tasks this build has engines for.
#include "app/engines.h"

#include "engines/denoise/image_engine.h"
#include "engines/encode/embed_engine.h"
#include "engines/generate/generate_engine.h"
#include "engines/vad/vad_engine.h"
#include "serving/echo_engine.h"

namespace prism::app {

serving::EngineFactories make_engines() {
  serving::EngineFactories engines;
  serving::register_echo_engine(engines);
  prism::engines::encode::register_embed_engine(engines);
  prism::engines::generate::register_generate_engine(engines);
  prism::engines::vad::register_vad_engine(engines);
  prism::engines::denoise::register_image_engine(engines);
  return engines;
}

}  // namespace prism::app
