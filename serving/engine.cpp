// serving/engine.cpp: the default encode loop and the factory table.
#include "serving/engine.h"

#include <exception>

namespace prism::serving {

void Engine::run_batch(std::span<const RequestPtr> batch) {
  for (const RequestPtr& r : batch) r->complete(unimplemented("this engine does not run batches"));
}

void Engine::serve(BatchSource& source) {
  while (true) {
    std::vector<RequestPtr> batch = source.next_batch();
    if (batch.empty()) return;
    // Engines should not throw; if a library inside one does, the batch fails, not the server.
    try {
      run_batch(batch);
    } catch (const std::exception& e) {
      for (const RequestPtr& r : batch) r->complete(internal_error(std::string("engine error: ") + e.what()));
    } catch (...) {
      for (const RequestPtr& r : batch) r->complete(internal_error("engine error"));
    }
    // Safety net for the exactly-once contract: an engine bug must not hang a client.
    for (const RequestPtr& r : batch)
      if (!r->completed()) r->complete(internal_error("engine returned without completing the request"));
  }
}

void EngineFactories::add(std::string task, EngineKind kind) {
  for (auto& [t, k] : factories_)
    if (t == task) {
      k = std::move(kind);
      return;
    }
  factories_.emplace_back(std::move(task), std::move(kind));
}

Result<EngineKind> EngineFactories::find(std::string_view task) const {
  std::string known;
  for (const auto& [t, k] : factories_) {
    if (t == task) return k;
    known += (known.empty() ? "" : ", ") + t;
  }
  return not_found("no engine for task '" + std::string(task) + "' (engines: " + (known.empty() ? "none" : known) +
                   ")");
}

}  // namespace prism::serving
