// app/engines.h: the engine kinds this build links, by task. `prism serve` serves them, and the
// commands that run a model in-process (embed, embed-queue work, transcribe) build their
// deployments from the same kinds, so every command runs the server's execution path.
// It must not: start anything (it only describes how each task is served).
#pragma once

#include "serving/engine.h"

namespace prism::app {

// Each engine issue registers its task here.
serving::EngineFactories make_engines();

}  // namespace prism::app
