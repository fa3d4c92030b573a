// pipelines/transcribe/asr_service.cpp: a transcribe deployment's speech context, built once on
// first use and shared. The build reads knobs and finds the deployments it submits to (no
// file is read), so holding the lock across it is cheap; a failed build is not kept (the next
// call tries again).
#include "pipelines/transcribe/asr_service.h"

#include <algorithm>

#include "frontends/generate_frontend.h"

namespace prism::pipelines::transcribe {
namespace {

// Requests to the "vad" deployment the settings name (none for the energy detector).
Result<VadSubmit> vad_deployment(const VadSettings& settings, const serving::DeploymentSet& deployments) {
  if (settings.kind != "silero") return VadSubmit();
  if (settings.deployment.empty())
    return failed_precondition("the Silero voice activity detector of file " + settings.model_path +
                               " has no \"vad\" deployment (knob 'vad_deployment')");
  Result<serving::Deployment*> found = deployments.find(settings.deployment);
  if (!found.has_value() || (*found)->config().task != "vad")
    return invalid_argument("knob 'vad_deployment': '" + settings.deployment + "' is not a deployment of task \"vad\"");
  serving::Deployment* vad = *found;
  if (!vad->ready()) {
    if (const Status failed = vad->load_error(); !failed.ok())
      return unavailable("its voice activity deployment '" + vad->name() + "' failed to load: " + failed.message());
    return unavailable("its voice activity deployment '" + vad->name() + "' is not ready");
  }
  return VadSubmit([vad](serving::RequestPtr r) { return vad->submit(std::move(r)); });  // the set outlives us
}

Result<std::shared_ptr<AsrService>> build_service(serving::Deployment& deployment, const serving::DeploymentSet& deployments) {
  serving::MetricsRegistry& registry = deployments.metrics();
  const std::string& name = deployment.name();
  const std::string not_speech = "model '" + name + "' is not a speech recognition model";
  if (deployment.config().task != "transcribe") return invalid_argument(not_speech);
  if (!deployment.ready()) {
    if (const Status failed = deployment.load_error(); !failed.ok())
      return unavailable("model '" + name + "' failed to load: " + failed.message());
    return unavailable("model '" + name + "' is not ready");
  }
  auto frontend = std::dynamic_pointer_cast<const frontends::GenerateFrontend>(deployment.frontend());
  if (!frontend || frontend->speech() == nullptr) return invalid_argument(not_speech);

  const serving::Knobs& knobs = deployment.config().knobs;
  auto service = std::make_shared<AsrService>();
  service->deployment = &deployment;
  TranscriptionContext& context = service->context;
  context.frontend = std::move(frontend);
  PRISM_ASSIGN_OR_RETURN(context.settings, TranscribeSettings::from_knobs(knobs));
  const serving::DeploymentConfig& config = deployment.config();
  context.settings.max_chunks_in_flight = std::max(1, config.batching.max_batch_size) * std::max(1, config.replicas);
  PRISM_ASSIGN_OR_RETURN(VadSubmit vad_submit, vad_deployment(context.settings.vad, deployments));
  PRISM_ASSIGN_OR_RETURN(context.vad, VoiceActivity::connect(context.settings.vad, std::move(vad_submit)));
  context.metrics = std::make_shared<AsrMetrics>(registry, serving::Labels{{"deployment", name},
                                                                           {"modality", deployment.modality()}});
  serving::Deployment* dep = &deployment;  // the set outlives its services (see the header)
  context.submit = [dep](serving::RequestPtr r) { return dep->submit(std::move(r)); };
  PRISM_ASSIGN_OR_RETURN(const LiveSettings live, LiveSettings::from_knobs(knobs));
  service->live = LiveScheduler::create(context, live);
  return service;
}

}  // namespace

AsrServices::AsrServices(serving::DeploymentSet& deployments) : deployments_(deployments) {}

AsrServices::~AsrServices() {
  std::lock_guard lock(mu_);
  for (auto& [name, service] : services_)
    if (service->live) service->live->stop();
}

Result<std::shared_ptr<AsrService>> AsrServices::find(std::string_view model) {
  std::lock_guard lock(mu_);
  if (auto it = services_.find(model); it != services_.end()) return it->second;
  PRISM_ASSIGN_OR_RETURN(serving::Deployment * deployment, deployments_.find(model));
  PRISM_ASSIGN_OR_RETURN(std::shared_ptr<AsrService> service, build_service(*deployment, deployments_));
  services_.emplace(std::string(model), service);
  return service;
}

}  // namespace prism::pipelines::transcribe
