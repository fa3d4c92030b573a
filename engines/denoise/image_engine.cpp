#include "engines/denoise/image_engine.h"

#include <algorithm>
#include <chrono>
#include <list>
#include <map>

#include "engines/compute_turn.h"
#include "engines/denoise/guidance.h"
#include "engines/denoise/image_pipeline.h"
#include "frontends/image_frontend.h"
#include "frontends/image_payload.h"
#include "runtime/arena.h"

namespace prism::engines::denoise {
namespace {

using serving::Clock;
using serving::RequestPtr;

constexpr int kMaxIntake = 16;  // requests admitted between two steps

struct ImageMetrics {
  ImageMetrics(serving::MetricsRegistry& m, const serving::Labels& labels)
      : steps(m.counter("prism_denoise_steps_total", "Denoising steps taken, one per image per step", labels)),
        cond_passes(m.counter("prism_denoise_model_passes_total", "Rows run through the denoiser, by pass",
                              with(labels, "cond"))),
        uncond_passes(m.counter("prism_denoise_model_passes_total", "Rows run through the denoiser, by pass",
                                with(labels, "uncond"))),
        step_seconds(m.histogram("prism_denoise_step_seconds", "One loop step: a batched model pass and the samplers",
                                 serving::latency_buckets_seconds(), labels)),
        image_seconds(m.histogram("prism_image_seconds", "An image request from admission to completion",
                                  serving::latency_buckets_seconds(), labels)),
        text_encode_seconds(m.histogram("prism_text_encode_seconds", "Encoding one prompt",
                                        serving::latency_buckets_seconds(), labels)),
        vae_decode_seconds(m.histogram("prism_vae_decode_seconds", "Decoding one image's latent",
                                       serving::latency_buckets_seconds(), labels)) {}
  static serving::Labels with(serving::Labels labels, const char* pass) {
    labels.emplace_back("pass", pass);
    return labels;
  }
  serving::Counter& steps;
  serving::Counter& cond_passes;
  serving::Counter& uncond_passes;
  serving::Histogram& step_seconds;
  serving::Histogram& image_seconds;
  serving::Histogram& text_encode_seconds;
  serving::Histogram& vae_decode_seconds;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class ImageEngine final : public serving::Engine {
 public:
  explicit ImageEngine(const serving::EngineContext& context)
      : config_(context.config), metrics_(context.metrics, context.labels), compute_(context.metrics, context.labels),
        replicas_(context.replicas) {}

  Status load() override {
    threads_ = set_replica_team(replicas_);
    ImagePipelineOptions options;
    PRISM_ASSIGN_OR_RETURN(options.precision, ops::parse_precision(config_.precision));
    PRISM_ASSIGN_OR_RETURN(const std::string text_precision,
                           config_.knobs.get_string("text_encoder_precision", config_.precision));
    PRISM_ASSIGN_OR_RETURN(options.text_encoder_precision, ops::parse_precision(text_precision));
    PRISM_ASSIGN_OR_RETURN(options.tiny_autoencoder, config_.knobs.get_string("tiny_autoencoder", ""));
    PRISM_ASSIGN_OR_RETURN(const std::string vae_precision, config_.knobs.get_string("vae_precision", "f32"));
    PRISM_ASSIGN_OR_RETURN(options.vae_precision, ops::parse_precision(vae_precision));
    if (options.vae_precision == ops::Precision::int8)
      return invalid_argument(config_.knobs.where("vae_precision") + " must be f32 or bf16 (the VAE has no int8 path)");
    PRISM_ASSIGN_OR_RETURN(pipeline_, ImagePipeline::load(config_.model, options));
    loop_.set_progress_callback([this](const DenoiseProgress& p) { on_progress(p); });
    return Status();
  }

  nlohmann::json describe() const override {
    return {{"engine", "denoise"},
            {"pipeline", "ZImagePipeline"},
            {"latent_channels", pipeline_->latent_channels()},
            {"vae_factor", pipeline_->vae_factor()},
            {"scheduler", configs::scheduler_class_name(pipeline_->scheduler().scheduler_class)},
            {"threads_per_replica", threads_}};
  }

  // NOTE: when nothing runs the replica blocks in next_batch; otherwise it polls between
  // steps, so a request joins at the next step and shares passes with those at its size.
  // A request's images are cancelled together, between steps.
  void serve(serving::BatchSource& source) override {
    while (true) {
      std::vector<RequestPtr> arrived = jobs_.empty() ? source.next_batch() : source.poll(kMaxIntake, int64_t{1} << 40);
      if (jobs_.empty() && arrived.empty()) return;
      for (RequestPtr& r : arrived) admit(std::move(r));
      if (source.aborting()) {
        for (Job& job : jobs_) job.request->complete(unavailable("the server is shutting down"));
        jobs_.clear();
        return;
      }
      for (Job& job : jobs_)
        if (job.request->cancelled())
          for (int i = 0; i < job.in_loop; ++i) loop_.cancel(job.first_id + i);
      if (loop_.num_running() > 0) step();
    }
  }

 private:
  struct Job {
    RequestPtr request;
    const frontends::ImageInput* input = nullptr;  // owned by request
    int64_t first_id = 0;                          // the loop ids of its images: first_id + i
    int n = 0;                                     // images asked
    int in_loop = 0;                               // images added to the loop (n unless admission failed)
    std::vector<media::Image> images;
    std::vector<int> previews_sent;  // per image
    int finished = 0;  // images the loop finished (done, cancelled or expired)
    int64_t cond_passes = 0, uncond_passes = 0;
    Clock::time_point start;
  };

  int64_t now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - epoch_).count();
  }

  void admit(RequestPtr r) {
    const auto* in = dynamic_cast<const frontends::ImageInput*>(r->input.get());
    if (in == nullptr) return (void)r->complete(invalid_argument("the image engine needs a frontends::ImageInput payload"));
    const frontends::ImageParams& p = in->params;
    if (in->prompt_tokens.empty() || (frontends::uses_cfg(p) && in->negative_tokens.empty()))
      return (void)r->complete(invalid_argument("the prompt has no tokens"));
    if ((p.preview == frontends::PreviewDecoder::tiny || p.tiny_decode) && !pipeline_->has_tiny_autoencoder())
      return (void)r->complete(invalid_argument("this deployment has no tiny autoencoder (knob tiny_autoencoder)"));
    Job job;
    job.request = r;
    job.input = in;
    job.first_id = next_id_;
    job.n = p.n;
    job.images.resize(size_t(p.n));
    job.previews_sent.assign(size_t(p.n), 0);
    job.start = Clock::now();
    next_id_ += p.n;
    Tensor cond, uncond;
    {
      ComputeTurn turn(compute_, threads_);
      cond = encode(in->prompt_tokens);
      if (frontends::uses_cfg(p)) uncond = encode(in->negative_tokens);
    }
    std::optional<int64_t> deadline;
    if (r->deadline != Clock::time_point::max())
      deadline = std::chrono::duration_cast<std::chrono::milliseconds>(r->deadline - epoch_).count();
    for (int i = 0; i < p.n; ++i) {
      Result<DenoiseRequest> dr = pipeline_->make_request(job.first_id + i, p, i, cond, uncond);
      if (dr.has_value()) {
        dr->deadline_ms = deadline;
        count_passes(*dr, job);
      }
      Status added = dr.has_value() ? loop_.add(std::move(dr).value()) : dr.status();
      if (!added.ok()) {
        r->complete(added);
        for (int k = 0; k < i; ++k) loop_.cancel(job.first_id + k);  // they finish at the next step
        break;
      }
      ++job.in_loop;
    }
    if (job.in_loop > 0) jobs_.push_back(std::move(job));
  }

  Tensor encode(const std::vector<int32_t>& tokens) {
    const Clock::time_point t0 = Clock::now();
    Tensor states = pipeline_->encode_prompt(tokens);
    metrics_.text_encode_seconds.observe(seconds_since(t0));
    return states;
  }

  // The passes the loop will run for one image: what the reply reports.
  static void count_passes(const DenoiseRequest& r, Job& job) {
    const int steps = r.schedule.num_steps();
    for (int s = 0; s < steps; ++s) {
      if (zero_init_step(r.guidance, s)) continue;
      ++job.cond_passes;
      if (cfg_active(r.guidance, r.uncond.defined(), s, steps, r.schedule.sigmas[size_t(s)])) ++job.uncond_passes;
    }
  }

  void step() {
    const DenoiseCounters before = loop_.counters();
    const Clock::time_point t0 = Clock::now();
    std::vector<DenoiseResult> finished;
    {
      ComputeTurn turn(compute_, threads_);
      finished = loop_.step(pipeline_->denoiser(), now_ms());
    }
    const DenoiseCounters& after = loop_.counters();
    if (after.model_calls > before.model_calls) metrics_.step_seconds.observe(seconds_since(t0));
    metrics_.steps.inc(double(after.steps - before.steps));
    metrics_.cond_passes.inc(double(after.cond_passes - before.cond_passes));
    metrics_.uncond_passes.inc(double(after.uncond_passes - before.uncond_passes));
    for (DenoiseResult& r : finished) finish_image(r);
    jobs_.remove_if([](const Job& j) { return j.finished == j.in_loop; });
  }

  Job* job_of(int64_t id, int& image) {
    for (Job& job : jobs_)
      if (id >= job.first_id && id < job.first_id + job.in_loop) {
        image = int(id - job.first_id);
        return &job;
      }
    return nullptr;
  }

  void on_progress(const DenoiseProgress& p) {
    int image = 0;
    Job* job = job_of(p.id, image);
    if (job == nullptr || job->request->completed()) return;
    if (job->input->params.report_steps) {
      auto progress = std::make_unique<frontends::ImageStep>();
      progress->image_index = image;
      progress->step = p.step + 1;
      progress->steps = p.num_steps;
      job->request->emit(std::move(progress));
    }
    const int count = job->input->params.partial_images;
    int& sent = job->previews_sent[size_t(image)];
    if (sent >= count || p.step + 1 != preview_step(sent, count, p.num_steps)) return;
    auto preview = std::make_unique<frontends::ImagePreview>();
    preview->image_index = image;
    preview->partial_index = sent++;
    preview->step = p.step + 1;
    preview->image = pipeline_->preview(*p.x0, job->input->params.preview == frontends::PreviewDecoder::tiny);
    job->request->emit(std::move(preview));
  }

  void finish_image(DenoiseResult& r) {
    int image = 0;
    Job* job = job_of(r.id, image);
    if (job == nullptr) return;
    ++job->finished;
    if (job->request->completed()) return;
    if (!r.status.ok()) {
      for (int i = 0; i < job->in_loop; ++i) loop_.cancel(job->first_id + i);
      if (r.status.code() == StatusCode::cancelled) return (void)job->request->complete_cancelled();
      if (r.status.code() == StatusCode::deadline_exceeded) return (void)job->request->complete_deadline_exceeded();
      return (void)job->request->complete(r.status);
    }
    const Clock::time_point t0 = Clock::now();
    {
      ComputeTurn turn(compute_, threads_);
      job->images[size_t(image)] = pipeline_->decode(r.latent, job->input->params.tiny_decode);
    }
    metrics_.vae_decode_seconds.observe(seconds_since(t0));
    if (job->finished < job->n) return;  // (a job whose admission failed is completed already)
    auto out = std::make_unique<frontends::ImageOutput>();
    out->images = std::move(job->images);
    out->steps = job->input->params.steps;
    out->cond_passes = job->cond_passes;
    out->uncond_passes = job->uncond_passes;
    metrics_.image_seconds.observe(seconds_since(job->start));
    job->request->complete(serving::PayloadPtr(std::move(out)));
  }

  const serving::DeploymentConfig& config_;
  ImageMetrics metrics_;
  ComputeMetrics compute_;
  int replicas_ = 1;
  int threads_ = 1;
  std::unique_ptr<ImagePipeline> pipeline_;
  DenoiseLoop loop_;
  std::list<Job> jobs_;  // admission order; a job leaves once every image of it finished
  int64_t next_id_ = 0;
  const Clock::time_point epoch_ = Clock::now();
};

}  // namespace

int preview_step(int k, int count, int steps) {
  // Previews at (k + 1) / (count + 1) of the way, on steps 1 .. steps - 1.
  const int s = int((int64_t(k) + 1) * steps / (int64_t(count) + 1));
  return std::clamp(s, 1, std::max(1, steps - 1));
}

void register_image_engine(serving::EngineFactories& factories) {
  factories.add("image", serving::EngineKind(
                             [](const serving::EngineContext& context) -> Result<std::unique_ptr<serving::Engine>> {
                               return std::unique_ptr<serving::Engine>(std::make_unique<ImageEngine>(context));
                             },
                             [](const serving::DeploymentConfig& config) -> Result<serving::FrontendPtr> {
                               PRISM_ASSIGN_OR_RETURN(auto frontend, frontends::ImageFrontend::load(config));
                               return serving::FrontendPtr(std::move(frontend));
                             }));
}

}  // namespace prism::engines::denoise
