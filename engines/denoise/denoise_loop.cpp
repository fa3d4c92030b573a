// engines/denoise/denoise_loop.cpp: DenoiseLoop.
#include "engines/denoise/denoise_loop.h"

#include <algorithm>
#include <string>

#include "base/check.h"
#include "engines/denoise/noise.h"

namespace prism::engines::denoise {
namespace {

Status check_conditioning(const Tensor& t, const char* what) {
  if (t.dim() != 2 || t.dtype() != DType::f32 || t.size(0) < 1)
    return invalid_argument(std::string(what) + " must be [L, cond_dim] f32 with L >= 1, got " + t.to_string());
  return Status();
}

Status check_request(const DenoiseRequest& r) {
  const Dims& s = r.latent_shape;
  if (s.size() != 3 && s.size() != 4) return invalid_argument("latent_shape must be [C, H, W] or [C, F, H, W]");
  for (int64_t d : s)
    if (d < 1) return invalid_argument("latent_shape " + s.to_string() + " has an empty dimension");
  if (r.initial_noise.defined() && (r.initial_noise.dtype() != DType::f32 || !(r.initial_noise.shape() == s)))
    return invalid_argument("initial_noise must be f32 " + s.to_string() + ", got " + r.initial_noise.to_string());
  PRISM_RETURN_IF_ERROR(check_conditioning(r.cond, "cond"));
  if (r.uncond.defined()) {
    PRISM_RETURN_IF_ERROR(check_conditioning(r.uncond, "uncond"));
    if (r.uncond.size(1) != r.cond.size(1)) return invalid_argument("cond and uncond differ in cond_dim");
  } else if (r.guidance.guidance_scale != 1.0) {
    return invalid_argument("guidance_scale != 1 needs an unconditional conditioning (uncond)");
  }
  const FlowSchedule& f = r.schedule;
  if (f.num_steps() < 1 || f.sigmas.size() != f.timesteps.size() + 1)
    return invalid_argument("the schedule needs num_steps >= 1 and num_steps + 1 sigmas");
  if (r.sampler.solver_order < 1 || r.sampler.solver_order > 3) return invalid_argument("solver_order must be 1..3");
  return r.guidance.validate();
}

// Tokens of a row: latent cells (the model's patching divides them by a constant) + text tokens.
int64_t row_tokens(const Dims& latent_shape, const Tensor& conditioning) {
  return latent_shape.numel() / latent_shape[0] + conditioning.size(0);
}

Tensor contiguous_f32(const Tensor& t, const Dims& shape) {
  PRISM_CHECK_MSG(t.dtype() == DType::f32 && t.shape() == shape, "Denoiser::end returned a row of the wrong shape");
  return t.contiguous();
}

}  // namespace

Status DenoiseLoop::add(DenoiseRequest request) {
  PRISM_RETURN_IF_ERROR(check_request(request));
  if (find(request.id)) return invalid_argument("request id " + std::to_string(request.id) + " is already running");
  Running r;
  r.latent = request.initial_noise.defined() ? request.initial_noise.contiguous().clone()
                                             : gaussian_noise(request.latent_shape, request.seed);
  r.shape_key = shape_key(request.latent_shape);
  r.request = std::move(request);
  running_.push_back(std::move(r));
  return Status();
}

void DenoiseLoop::cancel(int64_t id) {
  if (Running* r = find(id)) r->cancelled = true;
}

DenoiseLoop::Running* DenoiseLoop::find(int64_t id) {
  for (Running& r : running_)
    if (r.request.id == id) return &r;
  return nullptr;
}

int64_t DenoiseLoop::shape_key(const Dims& shape) {
  std::vector<int64_t> dims(shape.begin(), shape.end());
  auto [it, added] = shape_keys_.emplace(std::move(dims), int64_t(shape_keys_.size()));
  return it->second;
}

DenoiseView DenoiseLoop::view_of(const Running& r) const {
  const DenoiseRequest& q = r.request;
  DenoiseView v;
  v.id = q.id;
  v.step = r.step();
  v.num_steps = r.num_steps();
  v.shape_key = r.shape_key;
  v.cond_tokens = row_tokens(q.latent_shape, q.cond);
  v.uncond_tokens = q.uncond.defined() ? row_tokens(q.latent_shape, q.uncond) : 0;
  v.cfg_on = cfg_active(q.guidance, q.uncond.defined(), r.step(), r.num_steps(), r.sigma());
  v.model_pass = !zero_init_step(q.guidance, r.step());
  v.cancelled = r.cancelled;
  v.deadline_ms = q.deadline_ms;
  return v;
}

void DenoiseLoop::set_precision_schedule(PrecisionSchedule schedule,
                                         std::map<ops::Precision, const models::Denoiser*> models) {
  precision_ = std::move(schedule);
  models_ = std::move(models);
}

// NOTE: blocks [first, last) of one precision run back to back on one state; a change of
// precision at block b hands the state to the model loaded at the new one.
std::vector<Tensor> DenoiseLoop::run_pass(const models::Denoiser& model, const models::DenoiseBatch& batch, int step) {
  if (precision_.uniform()) return model.predict(batch);
  const int blocks = model.num_blocks();
  auto at = [&](int block) -> const models::Denoiser& {
    const ops::Precision p = precision_.at(step, block);
    if (p == precision_.default_precision) return model;
    const auto it = models_.find(p);
    PRISM_CHECK_MSG(it != models_.end(), "the precision schedule names a precision no model was loaded at");
    return *it->second;
  };
  std::unique_ptr<models::DenoiseState> state = at(0).begin(batch);
  for (int first = 0; first < blocks;) {
    int last = first + 1;
    while (last < blocks && &at(last) == &at(first)) ++last;
    at(first).run_blocks(*state, first, last);
    first = last;
  }
  return at(std::max(0, blocks - 1)).end(*state);
}

std::vector<DenoiseResult> DenoiseLoop::step(const models::Denoiser& model, int64_t now_ms) {
  std::vector<DenoiseView> views;
  for (const Running& r : running_) views.push_back(view_of(r));
  const DenoiseStepPlan plan = plan_denoise_step(views, limits_, now_ms);

  std::vector<DenoiseResult> results;
  for (const auto& [id, reason] : plan.finish)
    finish(id,
           reason == FinishReason::cancelled ? cancelled_error("the request was cancelled")
                                             : deadline_exceeded_error("the request's deadline passed"),
           results);

  Pass pass = build_pass(plan);
  std::vector<Tensor> out;
  if (!pass.batch.latents.empty()) {
    out = run_pass(model, pass.batch, pass.stepping.front()->step());
    PRISM_CHECK_MSG(out.size() == pass.batch.latents.size(), "Denoiser::predict returned a row count unlike the batch");
    ++counters_.model_calls;
    counters_.cond_passes += plan.num_cond_rows;
    counters_.uncond_passes += plan.num_uncond_rows;
  }
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlannedStep& p = plan.steps[i];
    advance(*pass.stepping[i], p.model_pass ? &out[pass.cond_row[i]] : nullptr,
            p.run_uncond ? &out[pass.uncond_row[i]] : nullptr);
  }
  // Ids first: erasing from the deque invalidates the pointers in pass.stepping.
  std::vector<int64_t> done;
  for (size_t i = 0; i < plan.steps.size(); ++i)
    if (pass.stepping[i]->step() == pass.stepping[i]->num_steps()) done.push_back(plan.steps[i].id);
  for (int64_t id : done) finish(id, Status(), results);
  return results;
}

// Rows: every conditional row in plan order, then every unconditional row.
DenoiseLoop::Pass DenoiseLoop::build_pass(const DenoiseStepPlan& plan) {
  Pass pass;
  auto add_row = [&](const Running& r, const Tensor& conditioning) {
    pass.batch.latents.push_back(r.latent);
    pass.batch.sigmas.push_back(float(r.sigma()));
    pass.batch.conditioning.push_back(conditioning);
    return pass.batch.latents.size() - 1;
  };
  for (const PlannedStep& p : plan.steps) {
    Running* r = find(p.id);
    PRISM_CHECK(r != nullptr);
    pass.stepping.push_back(r);
    pass.cond_row.push_back(p.model_pass ? add_row(*r, r->request.cond) : 0);
  }
  pass.uncond_row.assign(plan.steps.size(), 0);
  for (size_t i = 0; i < plan.steps.size(); ++i)
    if (plan.steps[i].run_uncond) pass.uncond_row[i] = add_row(*pass.stepping[i], pass.stepping[i]->request.uncond);
  return pass;
}

// Guidance, the sampler step and the progress event of one request. cond_v: its conditional
// row's output (null on a zero-init step: velocity 0); uncond_v: its unconditional row's or null.
void DenoiseLoop::advance(Running& r, const Tensor* cond_v, const Tensor* uncond_v) {
  const Dims& shape = r.request.latent_shape;
  Tensor v = cond_v ? contiguous_f32(*cond_v, shape) : Tensor::zeros(shape, DType::f32);
  if (uncond_v) v = guide(r.request.guidance, v, contiguous_f32(*uncond_v, shape));
  const int taken = r.step();
  const Tensor x0 = predicted_x0(r.latent, v, r.sigma());
  r.latent = sampler_step(r.request.sampler, r.sampler, r.request.schedule.sigmas, r.latent, v);
  ++counters_.steps;
  if (progress_) progress_({r.request.id, taken, r.num_steps(), &r.latent, &x0});
}

void DenoiseLoop::finish(int64_t id, Status status, std::vector<DenoiseResult>& results) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const Running& r) { return r.request.id == id; });
  PRISM_CHECK(it != running_.end());
  results.push_back({id, std::move(status), std::move(it->latent), it->step()});
  running_.erase(it);
}

}  // namespace prism::engines::denoise
