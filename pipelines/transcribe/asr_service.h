// pipelines/transcribe/asr_service.h: the speech side of a server's "transcribe" deployments,
// shared by the HTTP routes (/v1/audio/*), the Realtime WebSocket and `prism transcribe`.
// For each such deployment, built on first use once it is ready: the TranscriptionContext
// (its GenerateFrontend with the speech processor, the VAD its knobs name, the orchestration
// settings, AsrMetrics, a submit function over Deployment::submit) and its LiveScheduler.
// Destroying AsrServices stops the live schedulers; do it before the deployments stop.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string_view>

#include "base/status.h"
#include "pipelines/transcribe/live.h"
#include "pipelines/transcribe/transcription.h"
#include "serving/deployment_set.h"

namespace prism::pipelines::transcribe {

struct AsrService {
  serving::Deployment* deployment = nullptr;
  TranscriptionContext context;
  std::shared_ptr<LiveScheduler> live;
};

class AsrServices {
 public:
  explicit AsrServices(serving::DeploymentSet& deployments);
  ~AsrServices();  // stops every LiveScheduler
  AsrServices(const AsrServices&) = delete;
  AsrServices& operator=(const AsrServices&) = delete;

  // The service of the deployment named `model`: not_found (OpenAI's wording) when there is
  // none, invalid_argument when it is not a "transcribe" deployment, unavailable while it is
  // not ready; a bad knob value is invalid_argument naming it.
  Result<std::shared_ptr<AsrService>> find(std::string_view model);

 private:
  serving::DeploymentSet& deployments_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<AsrService>, std::less<>> services_;
};

}  // namespace prism::pipelines::transcribe
