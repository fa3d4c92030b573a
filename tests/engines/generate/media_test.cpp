// The generate engine with media, inside a real serving::Deployment over a fake decoder (its
// context holds a code of each spliced media row, fake_decoder.h) and a fake media encoder
// (rows a known function of the pixels, fake_media_encoder.h): rows land at the image-token
// positions, the prefix cache never shares KV between different images behind identical ids
// and does share it for the same image (a second turn re-encodes and re-prefills nothing but
// the new text), chunked prefill cutting an image, batched encoding across requests, pooling
// values, recomputation after preemption, metrics, and the errors of bad counts and of media
// sent to a text-only deployment.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "engines/encode/media_cache.h"
#include "engines/encode/media_encode.h"
#include "engines/generate/generate_engine_factory.h"
#include "engines/generate/kv_block_pool.h"
#include "engines/generate/media_rows.h"
#include "fake_decoder.h"
#include "fake_media_encoder.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "models/vlm/vision_language.h"
#include "serving/deployment.h"
#include "test_util/reference_io.h"

namespace prism::engines::generate {
namespace {

using serving::Deployment;
using serving::DeploymentConfig;
using serving::MetricsRegistry;
using test::CallGate;
using test::DecodeStats;
using test::FakeDecoder;
using test::FakeMediaEncoder;
using test::kFakeImageToken;
using test::MediaEncodeLog;

constexpr int kBlockSize = 4;
constexpr int64_t kBytesPerBlock = 2 /*layers*/ * 2 /*K, V*/ * kBlockSize * 4 /*f32*/;
constexpr int64_t kGrid = 4, kHidden = 8;

struct Outcome {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status status;
  frontends::GenerateOutput out;

  bool wait() {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; });
  }
  const std::vector<int32_t>& tokens() const { return out.choices.at(0).tokens; }
};

struct MediaSetup {
  int64_t kv_blocks = 64;
  int64_t max_context = 128;
  int64_t max_step_tokens = 64;
  int max_batch_size = 16;
  bool prefix_caching = true;
  int64_t max_encoder_views = 8;
  bool vision = true;                          // false: a text-only model directory
  float encoder_poison = 0.0f;                 // != 0: a view starting with this value fails
  std::vector<std::pair<std::string, int64_t>> knobs;  // extra integer knobs
  // Not empty: a real VLM directory served by the models/vlm loaders (default KV budget,
  // max_model_len 128) instead of the fakes.
  std::string real_model_dir;
  // The process-wide media cache outlives deployments (same model dir, same rows): start
  // each test without it unless a test wants the sharing.
  bool clear_media_cache = true;
};

// The fake encoder, failing on views that start with `poison`.
class PoisonableEncoder final : public models::MediaEncoder {
 public:
  PoisonableEncoder(FakeMediaEncoder::Options o, float poison) : inner_(o), poison_(poison) {}
  Tensor encode(const Tensor& pixels) const override {
    const int64_t per_view = 3 * image_size() * image_size();
    for (int64_t v = 0; v < pixels.size(0); ++v)
      if (poison_ != 0.0f && pixels.data<float>()[v * per_view] == poison_)
        throw std::runtime_error("fake media encoder: poisoned view");
    return inner_.encode(pixels);
  }
  int64_t image_size() const override { return inner_.image_size(); }
  int64_t grid_side() const override { return inner_.grid_side(); }
  int64_t output_size() const override { return inner_.output_size(); }
  double flops_per_view() const override { return inner_.flops_per_view(); }

 private:
  FakeMediaEncoder inner_;
  float poison_;
};

struct Fixture {
  explicit Fixture(const std::string& name, MediaSetup s = {}) {
    if (s.clear_media_cache) encode::MediaCache::shared().clear();
    DeploymentConfig c;
    c.name = "vlm";
    c.task = "chat";
    const bool real = !s.real_model_dir.empty();
    c.model = real       ? s.real_model_dir
              : s.vision ? test::write_fake_vlm_model(name, s.max_context)
                         : test::write_fake_generate_model(name, s.max_context);
    c.precision = "f32";
    c.batching.max_batch_size = s.max_batch_size;
    c.knobs.set("block_size", int64_t(kBlockSize));
    if (real) c.knobs.set("max_model_len", int64_t(128));
    else c.knobs.set("kv_cache_bytes", s.kv_blocks * kBytesPerBlock);
    c.knobs.set("max_step_tokens", s.max_step_tokens);
    c.knobs.set("prefix_caching", s.prefix_caching);
    if (s.vision) c.knobs.set("max_encoder_views", s.max_encoder_views, "vlm.toml:3");
    for (const auto& [k, v] : s.knobs) c.knobs.set(k, v, "vlm.toml:5");
    FakeDecoder::Options o;
    o.max_context = s.max_context;
    o.stats = stats;
    o.gate = gate;
    o.vocab = s.vision ? test::kFakeVlmVocab : test::kFakeVocab;
    DecoderLoader loader = [o](const DeploymentConfig&, ops::Precision) -> Result<std::unique_ptr<models::Decoder>> {
      return std::unique_ptr<models::Decoder>(std::make_unique<FakeDecoder>(o));
    };
    FakeMediaEncoder::Options e;
    e.log = log;
    const float poison = s.encoder_poison;
    MediaEncoderLoader media_loader = [e, poison](const DeploymentConfig&, ops::Precision)
        -> Result<std::unique_ptr<models::MediaEncoder>> {
      return std::unique_ptr<models::MediaEncoder>(std::make_unique<PoisonableEncoder>(e, poison));
    };
    if (real) {
      loader = [](const DeploymentConfig& config, ops::Precision p) {
        return models::load_vlm_language_model(config.model, p);
      };
      media_loader = [](const DeploymentConfig& config, ops::Precision p) {
        return models::load_vlm_media_encoder(config.model, p);
      };
    }
    d = std::make_unique<Deployment>(
        c, serving::EngineKind(generate_engine_factory(loader, media_loader), generate_frontend_factory()), metrics);
    d->start();
    load_status = d->wait_ready();
    base_tokens = stats->tokens.load();
    base_calls = log->calls.load();
    base_views = log->views.load();
  }
  ~Fixture() {
    gate->open();
    d->stop();
  }

  std::shared_ptr<Outcome> submit(std::vector<int32_t> prompt, std::vector<frontends::MediaItem> media, int max_tokens) {
    auto outcome = std::make_shared<Outcome>();
    auto in = std::make_unique<frontends::GenerateInput>();
    in->prompt = std::move(prompt);
    in->media = std::move(media);
    in->sampling.temperature = 0.0f;
    in->sampling.max_tokens = max_tokens;
    in->sampling.ignore_eos = true;  // real references continue through any id
    const int64_t cost = int64_t(in->prompt.size());
    serving::RequestPtr r = serving::make_request(std::move(in), [outcome](Result<serving::PayloadPtr> res) {
      std::lock_guard lock(outcome->mu);
      outcome->status = res.status();
      if (res.has_value())
        if (auto* o = dynamic_cast<frontends::GenerateOutput*>(res.value().get())) outcome->out = std::move(*o);
      outcome->done = true;
      outcome->cv.notify_all();
    });
    r->cost_tokens = std::max<int64_t>(cost, 1);
    const Status st = d->submit(r);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return outcome;
  }

  double metric(const std::string& name) const {
    std::istringstream text(metrics.render());
    for (std::string line; std::getline(text, line);)
      if (line.starts_with(name + "{")) return std::stod(line.substr(line.rfind(' ') + 1));
    ADD_FAILURE() << "no metric " << name;
    return -1;
  }
  int64_t encoder_calls() const { return log->calls.load() - base_calls; }
  int64_t encoded_views() const { return log->views.load() - base_views; }
  int64_t computed_tokens() const { return stats->tokens.load() - base_tokens; }
  std::vector<std::vector<float>> recorded_rows() const {
    std::lock_guard lock(stats->mu);
    return stats->media_rows;
  }

  std::shared_ptr<DecodeStats> stats = std::make_shared<DecodeStats>();
  std::shared_ptr<CallGate> gate = std::make_shared<CallGate>();
  std::shared_ptr<MediaEncodeLog> log = std::make_shared<MediaEncodeLog>();
  MetricsRegistry metrics;
  std::unique_ptr<Deployment> d;
  Status load_status;
  int64_t base_tokens = 0, base_calls = 0, base_views = 0;
};

std::vector<int32_t> text(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = int32_t(300 + rng() % 1000);
  return p;
}

std::vector<int32_t> image_tokens(int64_t n) { return std::vector<int32_t>(size_t(n), kFakeImageToken); }

std::vector<int32_t> concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// An item of `views` views drawn from `seed`, keyed by the seed (like content keys: equal
// seeds, equal pixels).
frontends::MediaItem image_item(uint32_t seed, int views = 1, int spatial_pool = 1, int temporal_pool = 1) {
  frontends::MediaItem item;
  item.kind = views > 1 && temporal_pool > 1 ? frontends::MediaItem::Kind::video : frontends::MediaItem::Kind::image;
  item.views = test::make_pixel_views(views, seed);
  media::MediaKeyBuilder b;
  b.add(std::string_view("test-item")).add(int64_t(seed)).add(int64_t(views));
  item.key = b.finish();
  item.spatial_pool = spatial_pool;
  item.temporal_pool = temporal_pool;
  const int64_t side = kGrid / spatial_pool;
  item.num_rows = (views + temporal_pool - 1) / temporal_pool * side * side;
  return item;
}

// The rows of an unpooled item, as the engine must splice them.
std::vector<std::vector<float>> raw_rows(const frontends::MediaItem& item) {
  const std::vector<float> flat = test::fake_media_rows(*item.views, kGrid, kHidden);
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r * kHidden < flat.size(); ++r)
    rows.emplace_back(flat.begin() + ptrdiff_t(r * kHidden), flat.begin() + ptrdiff_t((r + 1) * kHidden));
  return rows;
}

// The fake decoder's view of a prompt: image-token positions hold their rows' codes.
std::vector<int32_t> fake_context(const std::vector<int32_t>& prompt, const std::vector<std::vector<float>>& rows) {
  std::vector<int32_t> context = prompt;
  size_t k = 0;
  for (int32_t& t : context)
    if (t == kFakeImageToken) t = -test::media_row_code(rows.at(k++));
  EXPECT_EQ(k, rows.size());
  return context;
}

std::vector<int32_t> expected_output(const std::vector<int32_t>& prompt, std::initializer_list<const frontends::MediaItem*> items,
                                     int max_tokens) {
  std::vector<std::vector<float>> rows;
  for (const frontends::MediaItem* item : items)
    for (auto& r : raw_rows(*item)) rows.push_back(std::move(r));
  return test::expected_continuation(fake_context(prompt, rows), max_tokens, test::hashed_next_token);
}

TEST(GenerateMedia, ImageRowsFillTheImageTokenPositions) {
  Fixture f("media_basic");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  EXPECT_EQ(f.d->info().engine["vision"]["rows_per_view"], 16);
  const frontends::MediaItem a = image_item(1), b = image_item(2);
  const auto prompt = concat({text(3, 1), image_tokens(16), text(2, 2), image_tokens(16), text(5, 3)});
  auto o = f.submit(prompt, {a, b}, 6);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  EXPECT_EQ(o->tokens(), expected_output(prompt, {&a, &b}, 6));
  EXPECT_EQ(o->out.encoded_media, 2);
  EXPECT_EQ(o->out.prompt_tokens, int64_t(prompt.size()));
  EXPECT_EQ(f.encoder_calls(), 1);  // both items in one call (2 views <= 8)
  EXPECT_EQ(f.metric("prism_vlm_visual_tokens_sum"), 32.0);
  EXPECT_EQ(f.metric("prism_vlm_visual_tokens_count"), 1.0);
  EXPECT_EQ(f.metric("prism_vlm_encoder_seconds_per_image_count"), 2.0);
  EXPECT_EQ(f.metric("prism_media_cache_lookups_total"), 2.0);
  EXPECT_EQ(f.metric("prism_media_cache_hits_total"), 0.0);
  EXPECT_GT(f.metric("prism_media_cache_bytes"), 0.0);
  EXPECT_EQ(f.metric("prism_vlm_frames_sampled_total"), 0.0);
}

// Issue 8's isolation test: identical prompt ids, different images never share KV blocks
// holding visual rows; the same image shares them and is not encoded again.
TEST(GenerateMedia, PrefixCacheIsolatesDifferentImagesBehindIdenticalIds) {
  Fixture f("media_isolation");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  // 8 text tokens (2 whole blocks), 16 image rows (positions 8..23), 5 text tokens.
  const auto prompt = concat({text(8, 1), image_tokens(16), text(5, 2)});
  const frontends::MediaItem x = image_item(10), y = image_item(20);

  auto first = f.submit(prompt, {x}, 6);
  ASSERT_TRUE(first->wait());
  ASSERT_TRUE(first->status.ok()) << first->status.to_string();
  EXPECT_EQ(first->tokens(), expected_output(prompt, {&x}, 6));
  EXPECT_EQ(first->out.cached_prompt_tokens, 0);
  EXPECT_EQ(first->out.encoded_media, 1);

  // Another image behind the same ids: only the two text-only blocks are hits.
  const int64_t tokens_before = f.computed_tokens();
  auto other = f.submit(prompt, {y}, 6);
  ASSERT_TRUE(other->wait());
  ASSERT_TRUE(other->status.ok()) << other->status.to_string();
  EXPECT_EQ(other->out.cached_prompt_tokens, 8);
  EXPECT_EQ(f.computed_tokens() - tokens_before, int64_t(prompt.size()) - 8 + 5);
  EXPECT_EQ(other->tokens(), expected_output(prompt, {&y}, 6));
  EXPECT_NE(other->tokens(), first->tokens());
  EXPECT_EQ(other->out.encoded_media, 1);
  EXPECT_EQ(f.encoder_calls(), 2);

  // The first image again: every whole block is a hit, the encoder is not called, and the
  // output is the first one's.
  auto again = f.submit(prompt, {x}, 6);
  ASSERT_TRUE(again->wait());
  ASSERT_TRUE(again->status.ok()) << again->status.to_string();
  EXPECT_EQ(again->out.cached_prompt_tokens, 28);  // (29 - 1) / 4 blocks: all visual rows
  EXPECT_EQ(again->tokens(), first->tokens());
  EXPECT_EQ(again->out.encoded_media, 0);
  EXPECT_EQ(f.encoder_calls(), 2);

  // The same image after other text: no prefix hit, but the media cache has its rows.
  const auto shifted = concat({text(8, 77), image_tokens(16), text(5, 2)});
  auto cached = f.submit(shifted, {x}, 6);
  ASSERT_TRUE(cached->wait());
  ASSERT_TRUE(cached->status.ok()) << cached->status.to_string();
  EXPECT_EQ(cached->out.cached_prompt_tokens, 0);
  EXPECT_EQ(cached->out.encoded_media, 0);
  EXPECT_EQ(f.encoder_calls(), 2);
  EXPECT_EQ(cached->tokens(), expected_output(shifted, {&x}, 6));
  EXPECT_EQ(f.metric("prism_media_cache_hits_total"), 1.0);
  EXPECT_EQ(f.metric("prism_media_cache_lookups_total"), 3.0);
}

// A second turn about the same image: the first turn, its reply and new text. Nothing is
// encoded and only what follows the cached blocks (the new text and the reply's last partial
// block) is prefilled.
TEST(GenerateMedia, SecondTurnReusesTheImageAndPrefillsOnlyTheNewText) {
  Fixture f("media_second_turn");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const frontends::MediaItem x = image_item(5);
  const auto turn1 = concat({text(3, 1), image_tokens(16), text(5, 2)});  // 24 tokens
  auto first = f.submit(turn1, {x}, 6);
  ASSERT_TRUE(first->wait());
  ASSERT_TRUE(first->status.ok()) << first->status.to_string();
  EXPECT_EQ(first->tokens(), expected_output(turn1, {&x}, 6));
  const int64_t calls = f.encoder_calls(), before = f.computed_tokens();

  const auto turn2 = concat({turn1, first->tokens(), text(10, 3)});  // 40 tokens
  auto second = f.submit(turn2, {x}, 4);
  ASSERT_TRUE(second->wait());
  ASSERT_TRUE(second->status.ok()) << second->status.to_string();
  EXPECT_EQ(second->tokens(), expected_output(turn2, {&x}, 4));
  EXPECT_EQ(f.encoder_calls(), calls);
  EXPECT_EQ(second->out.encoded_media, 0);
  // Turn 1 computed 24 + 5 tokens: 7 whole blocks published, which cover the image.
  EXPECT_EQ(second->out.cached_prompt_tokens, 28);
  EXPECT_EQ(f.computed_tokens() - before, (40 - 28) + 3);  // 2 tokens of turn 1's tail + 10 new, then decodes
  EXPECT_EQ(f.metric("prism_media_cache_lookups_total"), 1.0);  // turn 2 did not even look
}

TEST(GenerateMedia, ChunkedPrefillCuttingAnImageEqualsAnUnchunkedRun) {
  const frontends::MediaItem x = image_item(3), y = image_item(4, 2);
  const auto prompt = concat({text(3, 1), image_tokens(16), text(1, 2), image_tokens(32), text(6, 3)});
  std::vector<int32_t> outputs[2];
  for (int chunked = 0; chunked < 2; ++chunked) {
    MediaSetup s;
    s.max_step_tokens = chunked ? 5 : 128;
    s.max_batch_size = 4;
    s.prefix_caching = false;
    Fixture f(chunked ? "media_chunked" : "media_unchunked", s);
    ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
    auto o = f.submit(prompt, {x, y}, 8);
    ASSERT_TRUE(o->wait());
    ASSERT_TRUE(o->status.ok()) << o->status.to_string();
    outputs[chunked] = o->tokens();
    EXPECT_EQ(f.stats->max_tokens.load(), chunked ? 5 : int64_t(prompt.size()));
    EXPECT_EQ(f.encoder_calls(), 1);  // the rows are kept across chunks
    EXPECT_EQ(f.recorded_rows().size(), 48u);
  }
  EXPECT_EQ(outputs[1], outputs[0]);
  EXPECT_EQ(outputs[0], expected_output(prompt, {&x, &y}, 8));
}

// Three requests of two 3-view items each, admitted in one step: the encoder sees every
// missing view of the step in calls of at most max_encoder_views views, each item once.
TEST(GenerateMedia, EncodesAllAdmittedRequestsItemsInBatchesOfMaxEncoderViews) {
  MediaSetup s;
  s.max_encoder_views = 4;
  s.max_step_tokens = 128;
  Fixture f("media_batching", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  // A text request holds the engine's first step, so the three media requests queue behind it.
  f.gate->pause();
  auto blocker = f.submit(text(3, 9), {}, 2);
  ASSERT_TRUE(f.gate->wait_entered(2));  // warm-up + the blocker's step
  std::vector<frontends::MediaItem> items;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<Outcome>> outs;
  for (uint32_t r = 0; r < 3; ++r) {
    items.push_back(image_item(100 + 2 * r, 3, 2));
    items.push_back(image_item(101 + 2 * r, 3, 2));
    prompts.push_back(concat({text(4, r), image_tokens(12), text(3, 10 + r), image_tokens(12), text(2, 20 + r)}));
    outs.push_back(f.submit(prompts.back(), {items[2 * r], items[2 * r + 1]}, 3));
  }
  // They are queued: the engine polls them all after the blocker's step.
  f.gate->open();
  ASSERT_TRUE(blocker->wait());
  int64_t encoded = 0;
  for (size_t r = 0; r < outs.size(); ++r) {
    ASSERT_TRUE(outs[r]->wait());
    ASSERT_TRUE(outs[r]->status.ok()) << outs[r]->status.to_string();
    encoded += outs[r]->out.encoded_media;
  }
  EXPECT_EQ(encoded, 6);
  EXPECT_EQ(f.encoded_views(), 18);
  std::vector<int64_t> calls;
  {
    std::lock_guard lock(f.log->mu);
    calls.assign(f.log->call_views.begin() + ptrdiff_t(f.base_calls), f.log->call_views.end());
  }
  for (int64_t v : calls) EXPECT_LE(v, 4);
  EXPECT_EQ(calls, (std::vector<int64_t>{4, 4, 4, 4, 2}));  // one run over the step's 18 views
  EXPECT_EQ(f.metric("prism_vlm_encoder_seconds_per_image_count"), 6.0);
  EXPECT_EQ(f.metric("prism_media_cache_hits_total"), 0.0);
}

// Pooled rows (spatial 2 × 2, temporal 2) reach the decoder with the averaged values, and the
// output follows them.
TEST(GenerateMedia, SpatialAndTemporalPoolingAverageTheRows) {
  MediaSetup s;
  s.prefix_caching = false;
  Fixture f("media_pooling", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  const frontends::MediaItem v = image_item(42, 3, 2, 2);  // views {0, 1} and {2}: 2 groups × 2² rows
  ASSERT_EQ(v.num_rows, 8);
  const auto prompt = concat({text(2, 1), image_tokens(8), text(3, 2)});
  auto o = f.submit(prompt, {v}, 5);
  ASSERT_TRUE(o->wait());
  ASSERT_TRUE(o->status.ok()) << o->status.to_string();
  EXPECT_EQ(f.metric("prism_vlm_frames_sampled_total"), 3.0);

  const auto raw = raw_rows(v);  // 3 views × 16 rows
  const auto got = f.recorded_rows();
  ASSERT_EQ(got.size(), 8u);
  for (int64_t g = 0; g < 2; ++g)
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 2; ++b) {
        const int64_t views = g == 0 ? 2 : 1;
        for (int64_t h = 0; h < kHidden; ++h) {
          double sum = 0;
          for (int64_t vv = 2 * g; vv < 2 * g + views; ++vv)
            for (int64_t i = 0; i < 2; ++i)
              for (int64_t j = 0; j < 2; ++j) sum += raw[size_t(vv * 16 + (2 * a + i) * 4 + 2 * b + j)][size_t(h)];
          EXPECT_NEAR(got[size_t(g * 4 + a * 2 + b)][size_t(h)], sum / double(views * 4), 1e-5)
              << "group " << g << " cell " << a << "," << b << " col " << h;
        }
      }
  EXPECT_EQ(o->tokens(), test::expected_continuation(fake_context(prompt, got), 5, test::hashed_next_token));
}

// A pool of one full sequence and several image requests: preempted sequences are
// recomputed, taking their rows again, and every output stays exact.
TEST(GenerateMedia, PreemptedRequestsTakeTheirRowsAgain) {
  for (bool prefix_caching : {false, true}) {
    MediaSetup s;
    s.kv_blocks = 16;  // one 64-token sequence
    s.max_context = 64;
    s.max_step_tokens = 16;
    s.prefix_caching = prefix_caching;
    Fixture f(prefix_caching ? "media_preempt_pc" : "media_preempt", s);
    ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
    std::vector<frontends::MediaItem> items;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::shared_ptr<Outcome>> outs;
    f.gate->pause();
    for (uint32_t i = 0; i < 4; ++i) {
      items.push_back(image_item(200 + i % 2));
      prompts.push_back(concat({text(2 + i, i), image_tokens(16), text(3, 50 + i)}));
      outs.push_back(f.submit(prompts.back(), {items.back()}, 30));
      if (i == 0) {
        ASSERT_TRUE(f.gate->wait_entered(2));
      }
    }
    f.gate->open();
    for (size_t i = 0; i < outs.size(); ++i) {
      ASSERT_TRUE(outs[i]->wait());
      ASSERT_TRUE(outs[i]->status.ok()) << outs[i]->status.to_string();
      EXPECT_EQ(outs[i]->tokens(), expected_output(prompts[i], {&items[i]}, 30)) << i;
    }
    EXPECT_GT(f.metric("prism_generate_preemptions_total"), 0.0) << prefix_caching;
    EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  }
}

TEST(GenerateMedia, WrongCountsAreClearErrors) {
  Fixture f("media_counts");
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  auto expect_error = [&](std::vector<int32_t> prompt, std::vector<frontends::MediaItem> media, const std::string& what) {
    auto o = f.submit(std::move(prompt), std::move(media), 2);
    ASSERT_TRUE(o->wait());
    EXPECT_EQ(o->status.code(), StatusCode::invalid_argument) << o->status.to_string();
    EXPECT_NE(o->status.message().find(what), std::string::npos) << o->status.message();
  };
  const frontends::MediaItem x = image_item(1);
  expect_error(concat({text(2, 1), image_tokens(15), text(2, 2)}), {x},
               "the prompt has 15 image-token positions (token id 50257), but its 1 media item(s) give 16 rows");
  expect_error(concat({text(2, 1), image_tokens(16), text(2, 2)}), {},
               "the prompt has 16 image-token positions (token id 50257), but its 0 media item(s) give 0 rows");
  frontends::MediaItem lying = x;
  lying.num_rows = 8;
  expect_error(concat({text(2, 1), image_tokens(8)}), {lying}, "media item 0 says 8 rows, but its 1 views give 16");
  frontends::MediaItem odd_pool = image_item(2, 1, 3);
  odd_pool.num_rows = 1;
  expect_error(concat({text(2, 1), image_tokens(1)}), {odd_pool},
               "media item 0: spatial pool 3 does not divide the encoder's grid side 4");
  frontends::MediaItem wrong_side = x;
  wrong_side.views = test::make_pixel_views(1, 7, 5);
  expect_error(concat({text(2, 1), image_tokens(16)}), {wrong_side},
               "media item 0 has 1 views of side 5 (75 values); the model's encoder takes views of [3, 4, 4]");
  frontends::MediaItem no_views = x;
  no_views.views = nullptr;
  expect_error(concat({text(2, 1), image_tokens(16)}), {x, no_views}, "media item 1 has no pixel views");
  EXPECT_EQ(f.encoder_calls(), 0);

  // The engine goes on.
  const auto prompt = concat({text(2, 1), image_tokens(16), text(2, 2)});
  auto good = f.submit(prompt, {x}, 3);
  ASSERT_TRUE(good->wait());
  ASSERT_TRUE(good->status.ok()) << good->status.to_string();
  EXPECT_EQ(good->tokens(), expected_output(prompt, {&x}, 3));
}

TEST(GenerateMedia, AnEncoderFailureFailsItsRequestsAndTheEngineGoesOn) {
  MediaSetup s;
  s.encoder_poison = 123.0f;
  Fixture f("media_encoder_failure", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  frontends::MediaItem bad = image_item(1);
  auto views = std::make_shared<media::PixelViews>(*bad.views);
  views->values[0] = 123.0f;
  bad.views = views;
  const auto prompt = concat({text(2, 1), image_tokens(16), text(2, 2)});
  auto o = f.submit(prompt, {bad}, 3);
  ASSERT_TRUE(o->wait());
  EXPECT_EQ(o->status.code(), StatusCode::internal);
  EXPECT_NE(o->status.message().find("poisoned view"), std::string::npos) << o->status.message();
  EXPECT_EQ(f.metric("prism_kv_cache_usage_ratio"), 0.0);
  const frontends::MediaItem good_item = image_item(2);
  auto good = f.submit(prompt, {good_item}, 3);
  ASSERT_TRUE(good->wait());
  ASSERT_TRUE(good->status.ok()) << good->status.to_string();
  EXPECT_EQ(good->tokens(), expected_output(prompt, {&good_item}, 3));
}

TEST(GenerateMedia, MediaOnATextOnlyDeploymentIsInvalid) {
  MediaSetup s;
  s.vision = false;
  Fixture f("media_text_only", s);
  ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
  EXPECT_FALSE(f.d->info().engine.contains("vision"));
  auto o = f.submit(concat({text(2, 1), text(16, 3)}), {image_item(1)}, 2);
  ASSERT_TRUE(o->wait());
  EXPECT_EQ(o->status.code(), StatusCode::invalid_argument);
  EXPECT_NE(o->status.message().find("does not take images or videos"), std::string::npos) << o->status.message();
  EXPECT_EQ(f.log->calls.load(), 0);  // no encoder was even loaded
}

TEST(GenerateMedia, VisionKnobsBelongToVisionDeploymentsAndAreChecked) {
  MediaSetup text_only;
  text_only.vision = false;
  text_only.knobs = {{"max_encoder_views", 4}};
  Fixture a("media_knob_text", text_only);
  ASSERT_FALSE(a.load_status.ok());
  EXPECT_NE(a.load_status.message().find("unknown knob 'max_encoder_views' for a chat deployment"), std::string::npos)
      << a.load_status.message();

  MediaSetup zero;
  zero.max_encoder_views = 0;
  Fixture b("media_knob_zero", zero);
  ASSERT_FALSE(b.load_status.ok());
  EXPECT_NE(b.load_status.message().find("vlm.toml:3: knob 'max_encoder_views' must be in [1, 4096] (got 0)"),
            std::string::npos)
      << b.load_status.message();

  MediaSetup budget;
  budget.knobs = {{"spatial_pool", 2}, {"video_num_frames", 4}};
  Fixture c("media_knob_budget", budget);
  EXPECT_TRUE(c.load_status.ok()) << c.load_status.to_string();
}

// The block hashes under media seeds: text-only blocks keep their hash; a block holding a
// visual row depends on the seed; equal seeds, equal hashes.
TEST(GenerateMedia, BlockHashesCoverMediaSeeds) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, kFakeImageToken, kFakeImageToken, 8, 9};
  const frontends::MediaItem x = image_item(1), y = image_item(2);
  std::vector<uint64_t> sx(tokens.size(), 0), sy(tokens.size(), 0);
  sx[5] = media_row_seed(x, 0), sx[6] = media_row_seed(x, 1);
  sy[5] = media_row_seed(y, 0), sy[6] = media_row_seed(y, 1);
  const auto text_only = hash_full_blocks(tokens, 4, 100);
  const auto hx = hash_full_blocks(tokens, 4, 100, sx), hy = hash_full_blocks(tokens, 4, 100, sy);
  ASSERT_EQ(hx.size(), 2u);
  EXPECT_EQ(hx[0], text_only[0]);
  EXPECT_EQ(hy[0], text_only[0]);
  EXPECT_NE(hx[1], hy[1]);
  EXPECT_NE(hx[1], text_only[1]);
  EXPECT_EQ(hx, hash_full_blocks(tokens, 4, 100, sx));
  EXPECT_NE(media_row_seed(x, 0), media_row_seed(x, 1));
  frontends::MediaItem pooled = x;
  pooled.spatial_pool = 2;
  EXPECT_NE(media_row_seed(pooled, 0), media_row_seed(x, 0));  // pooling changes the rows
  // Seeds shorter than the tokens: the rest are text.
  EXPECT_EQ(hash_full_blocks(tokens, 4, 100, std::span(sx).first(7)), hx);
}

TEST(GenerateMedia, PlaceMediaMapsPositionsToRowsInPromptOrder) {
  const frontends::MediaItem a = image_item(1, 1, 2), b = image_item(2, 1, 4);  // 4 rows and 1 row
  const std::vector<int32_t> prompt = {7, kFakeImageToken, kFakeImageToken, 8, kFakeImageToken, kFakeImageToken,
                                       kFakeImageToken, 9};
  Result<PromptMedia> m = place_media(prompt, kFakeImageToken, std::vector<frontends::MediaItem>{a, b});
  ASSERT_TRUE(m.has_value()) << m.status().to_string();
  EXPECT_EQ(m->row_of, (std::vector<int32_t>{-1, 0, 1, -1, 2, 3, 4, -1}));
  EXPECT_EQ(m->item_first_row, (std::vector<int64_t>{0, 4, 5}));
  EXPECT_EQ(m->item_last_position, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(m->end, 7);
  EXPECT_EQ(m->seeds[0], 0u);
  EXPECT_EQ(m->seeds[1], media_row_seed(a, 0));
  EXPECT_EQ(m->seeds[5], media_row_seed(a, 3));
  EXPECT_EQ(m->seeds[6], media_row_seed(b, 0));
  // Features that are not the item's views' rows are refused, not read past.
  encode::MediaFeatures short_features;
  short_features.rows = 8;
  short_features.cols = kHidden;
  short_features.values.assign(size_t(8 * kHidden), 0.0f);
  std::vector<float> out(size_t(a.num_rows * kHidden));
  const Status st = pool_media_rows(short_features, a, kGrid, out);
  EXPECT_EQ(st.code(), StatusCode::invalid_argument);
  EXPECT_NE(st.message().find("the encoder features have 8 rows for 1 views of 16 rows (16 expected)"),
            std::string::npos)
      << st.message();
  encode::MediaFeatures wide = short_features;
  wide.rows = 16;
  wide.cols = kHidden + 1;
  wide.values.assign(size_t(16 * (kHidden + 1)), 0.0f);
  EXPECT_EQ(pool_media_rows(wide, a, kGrid, out).code(), StatusCode::invalid_argument);
  // A text-only prompt on a VLM: nothing placed.
  Result<PromptMedia> none = place_media(std::vector<int32_t>{1, 2, 3}, kFakeImageToken, {});
  ASSERT_TRUE(none.has_value());
  EXPECT_EQ(none->end, 0);
  EXPECT_TRUE(none->seeds.empty());
}

// ---- a real tiny VLM (tests/reference/vlm_family.py) through the engine ----

// The LLaVA reference: two 28×28 images, 16 rows each, a prompt holding their rows, and the
// float64 greedy continuation. The frontend gets GPT-2's tokenizer with "<image>" as the
// reference's image token 150 (the tiny ids decode as GPT-2 bytes).
struct LlavaReference {
  std::string model_dir;
  std::vector<int32_t> prompt, generated;
  std::vector<frontends::MediaItem> media;
};

Result<LlavaReference> llava_reference() {
  namespace fs = std::filesystem;
  PRISM_ASSIGN_OR_RETURN(std::string dir, test::generate_reference("vlm_family.py", "vlm_family_llava_old",
                                                                   "write --family llava --layout old"));
  PRISM_ASSIGN_OR_RETURN(auto file, test::open_reference(dir));
  PRISM_ASSIGN_OR_RETURN(Tensor pixels, file->get("pixel_values"));
  PRISM_ASSIGN_OR_RETURN(Tensor ids, file->get("token_ids"));
  PRISM_ASSIGN_OR_RETURN(Tensor gen, file->get("generated"));
  LlavaReference r;
  const Tensor ids32 = ids.to(DType::i32).contiguous(), gen32 = gen.to(DType::i32).contiguous();
  r.prompt.assign(ids32.data<int32_t>(), ids32.data<int32_t>() + ids32.numel());
  r.generated.assign(gen32.data<int32_t>(), gen32.data<int32_t>() + gen32.numel());
  const Tensor px = pixels.to(DType::f32).contiguous();
  const int64_t side = px.size(2), per_view = 3 * side * side;
  for (int64_t v = 0; v < px.size(0); ++v) {
    auto views = std::make_shared<media::PixelViews>();
    views->side = int(side);
    views->num_views = 1;
    views->values.assign(px.data<float>() + v * per_view, px.data<float>() + (v + 1) * per_view);
    frontends::MediaItem item;
    item.views = views;
    media::MediaKeyBuilder b;
    b.add(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(views->values.data()),
                                   views->values.size() * sizeof(float)));
    item.key = b.finish();
    item.num_rows = 16;
    r.media.push_back(std::move(item));
  }
  r.model_dir = test::scratch_dir("media_llava_model");
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename() != "reference.safetensors" && e.path().filename() != "config.json")
      fs::copy_file(e.path(), fs::path(r.model_dir) / e.path().filename(), fs::copy_options::overwrite_existing);
  // The reference omits keys at transformers' defaults, as llava-1.5's config does; the
  // frontend wants the context length said (LlamaConfig's default).
  std::ifstream config_in(dir + "/config.json");
  nlohmann::json config = nlohmann::json::parse(config_in);
  if (!config["text_config"].contains("max_position_embeddings"))
    config["text_config"]["max_position_embeddings"] = 2048;
  std::ofstream(r.model_dir + "/config.json") << config.dump(2) << "\n";
  std::ifstream in(test::testdata_dir() + "/tokenizers/gpt2/tokenizer.json");
  nlohmann::json tokenizer = nlohmann::json::parse(in);
  tokenizer["added_tokens"].push_back({{"id", 150},
                                       {"content", "<image>"},
                                       {"single_word", false},
                                       {"lstrip", false},
                                       {"rstrip", false},
                                       {"normalized", false},
                                       {"special", true}});
  std::ofstream(r.model_dir + "/tokenizer.json") << tokenizer.dump() << "\n";
  return r;
}

// The engine's greedy tokens equal the reference's: in one prefill step and with chunks that
// cut the images (another deployment of the same model: its rows come from the media cache);
// a repeat hits the prefix cache over both images and encodes nothing.
TEST(GenerateMedia, RealTinyLlavaMatchesTheReferenceThroughTheEngine) {
  Result<LlavaReference> ref = llava_reference();
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  const int n = int(ref->generated.size());
  for (int64_t step_tokens : {128, 16}) {
    MediaSetup s;
    s.real_model_dir = ref->model_dir;
    s.max_step_tokens = step_tokens;
    s.clear_media_cache = step_tokens == 128;
    Fixture f("media_llava_" + std::to_string(step_tokens), s);
    ASSERT_TRUE(f.load_status.ok()) << f.load_status.to_string();
    auto o = f.submit(ref->prompt, ref->media, n);
    ASSERT_TRUE(o->wait());
    ASSERT_TRUE(o->status.ok()) << o->status.to_string();
    EXPECT_EQ(o->tokens(), ref->generated) << "max_step_tokens " << step_tokens;
    // The second deployment serves the same directory at the same precision: the
    // process-wide media cache already holds both images' rows.
    EXPECT_EQ(o->out.encoded_media, step_tokens == 128 ? 2 : 0);

    auto again = f.submit(ref->prompt, ref->media, n);
    ASSERT_TRUE(again->wait());
    ASSERT_TRUE(again->status.ok()) << again->status.to_string();
    EXPECT_EQ(again->tokens(), ref->generated);
    EXPECT_EQ(again->out.encoded_media, 0);
    EXPECT_EQ(again->out.cached_prompt_tokens, int64_t(ref->prompt.size() - 1) / kBlockSize * kBlockSize);
  }
}

// ---- the batched encoding runner alone ----

// An encoder that returns a fixed, wrong shape.
class MisshapenEncoder final : public models::MediaEncoder {
 public:
  Tensor encode(const Tensor& pixels) const override { return Tensor::zeros({pixels.size(0), 3}, DType::f32); }
  int64_t image_size() const override { return 4; }
  int64_t grid_side() const override { return 4; }
  int64_t output_size() const override { return 8; }
  double flops_per_view() const override { return 1; }
};

TEST(MediaEncodeRunner, CutsViewsAcrossItemsIntoCallsOfMaxViewsAndKeepsEachItemsRows) {
  auto log = std::make_shared<MediaEncodeLog>();
  FakeMediaEncoder::Options o;
  o.log = log;
  FakeMediaEncoder encoder(o);
  encode::MediaEncodeRunner runner(encoder, 2);
  const auto a = test::make_pixel_views(3, 1), b = test::make_pixel_views(1, 2), c = test::make_pixel_views(2, 3);
  const media::PixelViews* items[] = {a.get(), b.get(), c.get()};
  encode::MediaEncodeStats stats;
  Result<std::vector<encode::MediaFeaturesPtr>> out = runner.encode(items, &stats);
  ASSERT_TRUE(out.has_value()) << out.status().to_string();
  EXPECT_EQ(log->call_views, (std::vector<int64_t>{2, 2, 2}));  // a0 a1 | a2 b0 | c0 c1
  EXPECT_EQ(stats.calls, 3);
  EXPECT_EQ(stats.views, 6);
  EXPECT_EQ(stats.items, 3);
  ASSERT_EQ(out->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const encode::MediaFeatures& f = *(*out)[i];
    EXPECT_EQ(f.rows, items[i]->num_views * 16) << i;
    EXPECT_EQ(f.cols, 8) << i;
    EXPECT_EQ(f.values, test::fake_media_rows(*items[i])) << i;  // exact: the same function of the same pixels
  }
}

TEST(MediaEncodeRunner, BadViewsAndEncoderFailuresAreErrors) {
  FakeMediaEncoder encoder({});
  encode::MediaEncodeRunner runner(encoder, 8);
  const auto good = test::make_pixel_views(1, 1), wide = test::make_pixel_views(1, 1, 5);
  const media::PixelViews* wrong_side[] = {good.get(), wide.get()};
  Result<std::vector<encode::MediaFeaturesPtr>> out = runner.encode(wrong_side);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(out.status().message().find("media item 1 has 1 views of side 5"), std::string::npos)
      << out.status().message();

  FakeMediaEncoder::Options broken;
  broken.fail = true;
  FakeMediaEncoder failing(broken);
  encode::MediaEncodeRunner failing_runner(failing, 8);
  const media::PixelViews* one[] = {good.get()};
  out = failing_runner.encode(one);
  ASSERT_FALSE(out.has_value());
  EXPECT_EQ(out.status().code(), StatusCode::internal);
  EXPECT_NE(out.status().message().find("media encoding failed: fake media encoder: broken"), std::string::npos)
      << out.status().message();

  MisshapenEncoder misshapen;
  encode::MediaEncodeRunner misshapen_runner(misshapen, 8);
  out = misshapen_runner.encode(one);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.status().message().find("returned Tensor[1, 3] f32 for 1 views (expected [16, 8] f32)"),
            std::string::npos)
      << out.status().message();
}

}  // namespace
}  // namespace prism::engines::generate
