// The "vad" deployment's engine: a step loop over the running requests; each step scores the
// next block of every request with one SileroVad::run (the front end of all those windows as
// one GEMM, the LSTM stepping through each block from its request's state).
#include "engines/vad/vad_engine.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engines/compute_turn.h"
#include "frontends/vad_payload.h"
#include "models/vad/silero_vad.h"
#include "serving/config.h"

namespace prism::engines::vad {

static_assert(frontends::kVadWindowSamples == models::kSileroWindow && frontends::kVadStateSize == models::kSileroHidden &&
                  frontends::kVadContextSamples == models::kSileroContext,
              "the payload's state is Silero's");

namespace {

using serving::RequestPtr;

constexpr int kWindow = frontends::kVadWindowSamples;
// A request holds at most a day of audio (a transcription's max_audio_seconds is 3 h).
constexpr size_t kMaxSamples = size_t(24 * 3600) * 16000;
// Windows of one request per step (4 s of audio): small enough that a live window joins a
// forward within milliseconds, large enough for the front end's GEMM.
constexpr int kStepWindows = 128;
// Requests running at once; more wait in the deployment's queue.
constexpr int kMaxRunning = 256;

struct VadMetrics {
  VadMetrics(serving::MetricsRegistry& m, const serving::Labels& labels)
      : windows(m.counter("prism_vad_windows_total", "Voice activity windows scored", labels)),
        forward_windows(m.histogram("prism_vad_forward_windows", "Windows scored in one forward", kWindowBounds, labels)),
        forward_streams(m.histogram("prism_vad_forward_streams",
                                    "Requests (stream pieces) whose windows shared one forward", kStreamBounds,
                                    labels)) {}
  static constexpr double kWindowBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096};
  static constexpr double kStreamBounds[] = {1, 2, 3, 4, 8, 16, 32, 64, 128};
  serving::Counter& windows;
  serving::Histogram& forward_windows;
  serving::Histogram& forward_streams;
};

models::SileroState to_model(const frontends::VadStreamState& s) {
  models::SileroState m;
  m.h = s.h;
  m.c = s.c;
  m.context = s.context;
  return m;
}

frontends::VadStreamState from_model(const models::SileroState& m) {
  frontends::VadStreamState s;
  s.h = m.h;
  s.c = m.c;
  s.context = m.context;
  return s;
}

class VadEngine final : public serving::Engine {
 public:
  explicit VadEngine(const serving::EngineContext& context)
      : model_path_(context.config.model), metrics_(context.metrics, context.labels), compute_(context.metrics, context.labels),
        replicas_(context.replicas) {}

  Status load() override {
    threads_ = set_replica_team(replicas_);
    Result<std::unique_ptr<models::SileroVad>> model = models::SileroVad::load(model_path_);
    if (!model.has_value()) return model.status();
    model_ = std::move(*model);
    return Status();
  }

  nlohmann::json describe() const override {
    return {{"engine", "vad"}, {"model", "silero"}, {"window_samples", frontends::kVadWindowSamples},
            {"threads_per_replica", threads_}};
  }

  // NOTE: a step scores the next kStepWindows windows of every running request as one
  // forward; requests that arrive meanwhile join at the next step, so a live stream's window
  // never waits behind a whole recording, and two recordings share every forward.
  void serve(serving::BatchSource& source) override {
    std::vector<Running> running;
    while (true) {
      std::vector<RequestPtr> arrived =
          running.empty() ? source.next_batch() : source.poll(kMaxRunning, int64_t{1} << 40);
      if (running.empty() && arrived.empty()) return;
      for (RequestPtr& r : arrived) admit(std::move(r), running);
      if (source.aborting()) {
        for (Running& r : running) r.request->complete(unavailable("the server is shutting down"));
        return;
      }
      std::erase_if(running, [](Running& r) {
        if (!r.request->cancelled()) return false;
        r.request->complete_cancelled();
        return true;
      });
      if (!running.empty()) step(running);
    }
  }

 private:
  struct Running {
    RequestPtr request;
    const frontends::VadInput* input = nullptr;
    models::SileroState state;
    std::vector<float> probabilities;  // scored so far
  };

  static void admit(RequestPtr r, std::vector<Running>& running) {
    const auto* in = dynamic_cast<const frontends::VadInput*>(r->input.get());
    if (r->cancelled()) {
      r->complete_cancelled();
    } else if (in == nullptr) {
      r->complete(internal_error("a vad deployment got a request that is not a VadInput"));
    } else if (in->samples.empty() || in->samples.size() > kMaxSamples) {
      r->complete(invalid_argument("a voice activity request holds 1 to " + std::to_string(kMaxSamples) +
                                   " samples, got " + std::to_string(in->samples.size())));
    } else {
      running.push_back(Running{std::move(r), in, to_model(in->state), {}});
    }
  }

  void step(std::vector<Running>& running) {
    std::vector<std::span<const float>> pieces;
    std::vector<models::SileroState*> states;
    for (Running& r : running) {
      const size_t first = r.probabilities.size() * size_t(kWindow);
      const size_t n = std::min(r.input->samples.size() - first, size_t(kStepWindows * kWindow));
      pieces.emplace_back(r.input->samples.data() + first, n);
      states.push_back(&r.state);
    }
    std::vector<std::vector<float>> probabilities;
    {
      ComputeTurn turn(compute_, threads_);
      probabilities = model_->run(pieces, states);
    }
    int64_t windows = 0;
    for (size_t i = 0; i < running.size(); ++i) {
      windows += int64_t(probabilities[i].size());
      running[i].probabilities.insert(running[i].probabilities.end(), probabilities[i].begin(), probabilities[i].end());
    }
    metrics_.windows.inc(double(windows));
    metrics_.forward_windows.observe(double(windows));
    metrics_.forward_streams.observe(double(running.size()));
    std::erase_if(running, [](Running& r) {
      if (r.probabilities.size() * size_t(kWindow) < r.input->samples.size()) return false;
      auto out = std::make_unique<frontends::VadOutput>();
      out->probabilities = std::move(r.probabilities);
      out->state = from_model(r.state);
      r.request->complete(serving::PayloadPtr(std::move(out)));
      return true;
    });
  }

  const std::string model_path_;
  VadMetrics metrics_;
  ComputeMetrics compute_;
  const int replicas_;
  int threads_ = 1;
  std::unique_ptr<models::SileroVad> model_;
};

}  // namespace

void register_vad_engine(serving::EngineFactories& factories) {
  factories.add("vad", serving::EngineKind([](const serving::EngineContext& context) -> Result<std::unique_ptr<serving::Engine>> {
    return std::unique_ptr<serving::Engine>(std::make_unique<VadEngine>(context));
  }));
}

}  // namespace prism::engines::vad
