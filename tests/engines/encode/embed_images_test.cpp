// Image embeddings with the tiny CLIP and SigLIP dual encoders of tests/reference/
// vision_family.py: the frontend reads both towers' limits, its tokenizer and image processor
// (SigLIP pads texts to its length); texts and images land in one space (same dims, unit
// length); an image's vector is the model's embed_images normalised, and both kinds match the
// PyTorch reference; the media cache skips the tower on a hit (counted by a wrapper around
// the tower and by the cache's stats); images run in micro-batches; the engine keeps mixed
// inputs in order, online and bulk, and fails bad image payloads alone.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "embed_dual_encoder_dir.h"
#include "engines/encode/embed_engine.h"
#include "engines/encode/embedder.h"
#include "engines/encode/media_cache.h"
#include "fake_encoder.h"
#include "frontends/embed_frontend.h"
#include "frontends/embed_payload.h"
#include "models/pooling.h"
#include "models/vision/dual_encoder.h"
#include "serving/deployment.h"
#include "test_util/reference_io.h"

namespace prism::engines::encode {
namespace {

namespace fs = std::filesystem;

serving::Knobs knobs_of(std::initializer_list<std::pair<std::string, serving::KnobValue>> values) {
  serving::Knobs k;
  for (const auto& [name, v] : values) k.set(name, v, "prism.toml:3");
  return k;
}

std::string model_dir(const std::string& family) {
  Result<std::string> dir = test::dual_encoder_dir(family);
  EXPECT_TRUE(dir.has_value()) << dir.status().to_string();
  return dir.has_value() ? dir.value() : std::string();
}

std::shared_ptr<const frontends::EmbedFrontend> frontend(const std::string& family, const serving::Knobs& knobs = {}) {
  Result<std::shared_ptr<const frontends::EmbedFrontend>> fe = frontends::EmbedFrontend::load(model_dir(family), knobs);
  EXPECT_TRUE(fe.has_value()) << fe.status().to_string();
  return fe.has_value() ? fe.value() : nullptr;
}

// The frontend alone (tests that run no model): no Python needed.
std::string frontend_dir(const std::string& family) {
  return test::dual_encoder_frontend_dir(family, "embed_images_frontend_" + family);
}
std::shared_ptr<const frontends::EmbedFrontend> frontend_only(const std::string& family, const serving::Knobs& knobs = {}) {
  Result<std::shared_ptr<const frontends::EmbedFrontend>> fe = frontends::EmbedFrontend::load(frontend_dir(family), knobs);
  EXPECT_TRUE(fe.has_value()) << fe.status().to_string();
  return fe.has_value() ? fe.value() : nullptr;
}

double norm(std::span<const float> v) {
  double s = 0;
  for (float x : v) s += double(x) * x;
  return std::sqrt(s);
}

std::vector<float> normalised(std::span<const float> v) {
  const double n = std::max(norm(v), 1e-12);
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = float(v[i] / n);
  return out;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double(a[i]) - b[i]));
  return d;
}

// Counts the views the wrapped image tower is asked to embed, and its calls.
class CountingImageEmbedder final : public models::ImageEmbedder {
 public:
  CountingImageEmbedder(std::unique_ptr<models::ImageEmbedder> inner, std::shared_ptr<std::atomic<int64_t>> views,
                        std::shared_ptr<std::atomic<int64_t>> calls)
      : inner_(std::move(inner)), views_(std::move(views)), calls_(std::move(calls)) {}
  Tensor embed_images(const Tensor& pixels) const override {
    views_->fetch_add(pixels.size(0));
    calls_->fetch_add(1);
    return inner_->embed_images(pixels);
  }
  int64_t image_size() const override { return inner_->image_size(); }
  int64_t embedding_size() const override { return inner_->embedding_size(); }
  double flops_per_image() const override { return inner_->flops_per_image(); }

 private:
  std::unique_ptr<models::ImageEmbedder> inner_;
  std::shared_ptr<std::atomic<int64_t>> views_, calls_;
};

struct CountedEmbedder {
  std::unique_ptr<Embedder> embedder;
  std::shared_ptr<std::atomic<int64_t>> views = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<std::atomic<int64_t>> calls = std::make_shared<std::atomic<int64_t>>(0);
};

CountedEmbedder counted_embedder(std::shared_ptr<const frontends::EmbedFrontend> fe, EmbedderOptions options = {}) {
  CountedEmbedder c;
  Result<models::DualEncoderModel> m = models::load_dual_encoder(fe->model_dir(), options.precision);
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  if (!m.has_value()) return c;
  auto image = std::make_unique<CountingImageEmbedder>(std::move(m->image), c.views, c.calls);
  Result<std::unique_ptr<Embedder>> e = Embedder::create(fe, options, std::move(m->text), std::move(image));
  EXPECT_TRUE(e.has_value()) << e.status().to_string();
  if (e.has_value()) c.embedder = std::move(e).value();
  return c;
}

frontends::EmbedImage prepared(const frontends::EmbedFrontend& fe, int seed, int w = 40, int h = 30) {
  Result<frontends::EmbedImage> im = fe.prepare_image(test::test_image(w, h, seed));
  EXPECT_TRUE(im.has_value()) << im.status().to_string();
  return im.has_value() ? im.value() : frontends::EmbedImage{};
}

std::vector<float> embed_images(Embedder& e, const std::vector<frontends::EmbedImage>& images, EmbedStats* stats = nullptr,
                                int64_t dims = 0) {
  std::vector<ImageRef> refs;
  for (const frontends::EmbedImage& im : images) refs.push_back({im.views.get(), im.key});
  const int64_t out_dims = dims ? dims : e.frontend().dims();
  std::vector<float> out(images.size() * size_t(out_dims));
  e.embed_images_into(refs, dims, out, stats);
  return out;
}

// ---- the frontend ----

TEST(EmbedImagesFrontend, ClipReadsBothTowersAndItsTokenizer) {
  auto fe = frontend_only("clip");
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->family(), "clip");
  EXPECT_EQ(fe->dims(), 48);        // projection_dim
  EXPECT_EQ(fe->max_tokens(), 16);  // text_config.max_position_embeddings
  EXPECT_EQ(fe->vocab_size(), test::kDualVocab);
  EXPECT_EQ(fe->pooling(), configs::Pooling::last_token);
  EXPECT_TRUE(fe->normalize());
  EXPECT_TRUE(fe->accepts_images());
  EXPECT_FALSE(fe->pads_to_max_tokens());
  EXPECT_EQ(fe->image_size(), 32);
  EXPECT_EQ(fe->image_tokens(), 17);  // 4 × 4 patches + the class token
  Result<std::vector<int32_t>> ids = fe->tokenize("A photo of  a cat", false);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int32_t>{test::kClipStart, test::kClipA, test::kClipPhoto, test::kClipOf, test::kClipA,
                                        test::kClipCat, test::kClipEnd}));
  // Truncation keeps <|endoftext|>, the token CLIP pools.
  std::string many;
  for (int i = 0; i < 30; ++i) many += "cat ";
  Result<std::vector<int32_t>> cut = fe->tokenize(many, true);
  ASSERT_TRUE(cut.has_value());
  ASSERT_EQ(cut->size(), 16u);
  EXPECT_EQ(cut->back(), test::kClipEnd);
  EXPECT_FALSE(fe->tokenize(many, false).has_value());
}

TEST(EmbedImagesFrontend, SiglipPadsEveryTextToItsLength) {
  auto fe = frontend_only("siglip");
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->family(), "siglip");
  EXPECT_EQ(fe->dims(), 64);  // text hidden_size
  EXPECT_TRUE(fe->pads_to_max_tokens());
  EXPECT_EQ(fe->pad_id(), test::kSiglipEos);  // "</s>", as the real tokenizer_config.json says
  EXPECT_EQ(fe->image_tokens(), 16);          // no class token
  Result<std::vector<int32_t>> ids = fe->tokenize("a cat", false);
  ASSERT_TRUE(ids.has_value()) << ids.status().to_string();
  std::vector<int32_t> want = {test::kSiglipA, test::kSiglipCat, test::kSiglipEos};
  want.resize(16, test::kSiglipEos);
  EXPECT_EQ(*ids, want);
  const std::vector<int64_t> given = {test::kSiglipDog, test::kSiglipEos};
  Result<std::vector<int32_t>> checked = fe->check_ids(given, false);
  ASSERT_TRUE(checked.has_value());
  ASSERT_EQ(checked->size(), 16u);
  EXPECT_EQ((*checked)[0], test::kSiglipDog);
  EXPECT_EQ(checked->back(), test::kSiglipEos);
}

TEST(EmbedImagesFrontend, MatryoshkaDimsOnlyWhenConfigured) {
  auto fe = frontend_only("clip");
  ASSERT_TRUE(fe);
  EXPECT_TRUE(fe->check_dimensions(0).ok());
  EXPECT_TRUE(fe->check_dimensions(48).ok());
  const Status refused = fe->check_dimensions(24);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("cannot be shortened"), std::string::npos) << refused.message();
  auto configured = frontend_only("clip", knobs_of({{"matryoshka_dims", std::string("48,24")}}));
  ASSERT_TRUE(configured);
  EXPECT_TRUE(configured->check_dimensions(24).ok());
  EXPECT_FALSE(configured->check_dimensions(12).ok());
}

TEST(EmbedImagesFrontend, KnobsOfADualEncoder) {
  const std::string dir = frontend_dir("clip");
  auto pooled = frontends::EmbedFrontend::load(dir, knobs_of({{"pooling", std::string("mean")}}));
  ASSERT_FALSE(pooled.has_value());
  EXPECT_NE(pooled.status().message().find("last token"), std::string::npos) << pooled.status().message();
  EXPECT_FALSE(frontends::EmbedFrontend::load(dir, knobs_of({{"max_encoder_views", int64_t{0}}})).has_value());
  EXPECT_FALSE(frontends::EmbedFrontend::load(dir, knobs_of({{"max_image_pixels", int64_t{-1}}})).has_value());

  auto fe = frontend_only("clip", knobs_of({{"allowed_media_hosts", std::string(" images.example.com, *.cdn.org ")},
                                       {"allowed_local_media_dir", std::string("/srv/media")},
                                       {"max_media_bytes", int64_t{1000000}},
                                       {"max_image_pixels", int64_t{1000}}}));
  ASSERT_TRUE(fe);
  EXPECT_EQ(fe->media_policy().allowed_hosts, (std::vector<std::string>{"images.example.com", "*.cdn.org"}));
  EXPECT_EQ(fe->media_policy().allowed_local_dir, "/srv/media");
  EXPECT_EQ(fe->media_policy().max_bytes, 1000000);
  EXPECT_EQ(fe->image_limits().max_pixels, 1000);
  // 40 × 30 = 1200 pixels, past the deployment's limit of 1000.
  Result<frontends::EmbedImage> big = fe->prepare_image_url(test::png_data_url(test::test_image(40, 30, 1)));
  ASSERT_FALSE(big.has_value());
  EXPECT_EQ(big.status().code(), StatusCode::invalid_argument);
  EXPECT_NE(big.status().message().find("1000"), std::string::npos) << big.status().message();
  EXPECT_TRUE(fe->prepare_image_url(test::png_data_url(test::test_image(30, 30, 1))).has_value());
}

TEST(EmbedImagesFrontend, SpaceIdCoversThePreprocessor) {
  const std::string dir = frontend_dir("clip");
  auto fe = frontend_only("clip");
  ASSERT_TRUE(fe);
  const std::string copy = test::scratch_dir("embed_images_space_copy");
  for (const auto& entry : fs::directory_iterator(dir))
    fs::copy_file(entry.path(), copy + "/" + entry.path().filename().string(), fs::copy_options::overwrite_existing);
  auto same = frontends::EmbedFrontend::load(copy);
  ASSERT_TRUE(same.has_value()) << same.status().to_string();
  EXPECT_EQ(same.value()->space_id(), fe->space_id());
  nlohmann::json pre = test::preprocessor_json("clip");
  pre["image_mean"] = {0.5, 0.5, 0.5};
  std::ofstream(copy + "/preprocessor_config.json") << pre.dump();
  auto other = frontends::EmbedFrontend::load(copy);
  ASSERT_TRUE(other.has_value()) << other.status().to_string();
  EXPECT_NE(other.value()->space_id(), fe->space_id());
}

TEST(EmbedImagesFrontend, PreparedImagesAreKeyedByContent) {
  auto fe = frontend_only("clip");
  ASSERT_TRUE(fe);
  const frontends::EmbedImage a = prepared(*fe, 1), a_again = prepared(*fe, 1), b = prepared(*fe, 2);
  ASSERT_TRUE(a.views && b.views);
  EXPECT_EQ(a.views->num_views, 1);
  EXPECT_EQ(a.views->side, 32);
  EXPECT_EQ(a.key, a_again.key);
  EXPECT_NE(a.key, b.key);
  EXPECT_TRUE(fe->check_image(a).ok());
  // The same pixels sent as a PNG data URL: the same key.
  Result<frontends::EmbedImage> via_url = fe->prepare_image_url(test::png_data_url(test::test_image(40, 30, 1)));
  ASSERT_TRUE(via_url.has_value()) << via_url.status().to_string();
  EXPECT_EQ(via_url->key, a.key);
  Result<frontends::EmbedImage> corrupt = fe->prepare_image_url("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAAB");
  ASSERT_FALSE(corrupt.has_value());
  EXPECT_EQ(corrupt.status().code(), StatusCode::invalid_argument);
}

TEST(EmbedImagesFrontend, TextOnlyModelsTakeNoImages) {
  auto fe = frontends::EmbedFrontend::load(test::FakeModelDir{}.write("embed_images_bert"));
  ASSERT_TRUE(fe.has_value()) << fe.status().to_string();
  EXPECT_FALSE(fe.value()->accepts_images());
  Result<frontends::EmbedImage> im = fe.value()->prepare_image(test::test_image(8, 8, 1));
  ASSERT_FALSE(im.has_value());
  EXPECT_EQ(im.status().code(), StatusCode::failed_precondition);
  EXPECT_NE(im.status().message().find("takes no images"), std::string::npos);
}

// ---- the embedder ----

class EmbedImagesFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(EmbedImagesFamily, TextAndImageShareOneSpace) {
  auto fe = frontend(GetParam());
  ASSERT_TRUE(fe);
  Result<std::unique_ptr<Embedder>> e = Embedder::load(fe, {});
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  ASSERT_TRUE(e.value()->accepts_images());
  Result<std::vector<int32_t>> ids = fe->tokenize("a photo of a cat", false);
  ASSERT_TRUE(ids.has_value());
  const std::vector<std::vector<int32_t>> texts = {*ids};
  const std::vector<float> text = e.value()->embed(texts);
  const std::vector<float> image = embed_images(*e.value(), {prepared(*fe, 3)});
  ASSERT_EQ(text.size(), size_t(fe->dims()));
  ASSERT_EQ(image.size(), size_t(fe->dims()));
  EXPECT_NEAR(norm(text), 1.0, 1e-5);
  EXPECT_NEAR(norm(image), 1.0, 1e-5);
}

TEST_P(EmbedImagesFamily, ImageVectorIsTheModelsEmbedImagesNormalised) {
  auto fe = frontend(GetParam());
  ASSERT_TRUE(fe);
  MediaCache::shared().clear();
  Result<std::unique_ptr<Embedder>> e = Embedder::load(fe, {});
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  const std::vector<frontends::EmbedImage> images = {prepared(*fe, 4), prepared(*fe, 5, 25, 60)};
  const std::vector<float> got = embed_images(*e.value(), images);

  Result<models::DualEncoderModel> m = models::load_dual_encoder(fe->model_dir(), ops::Precision::f32);
  ASSERT_TRUE(m.has_value()) << m.status().to_string();
  const int64_t d = fe->dims();
  for (size_t i = 0; i < images.size(); ++i) {
    const std::vector<float>& v = images[i].views->values;
    const Tensor pixels = Tensor::from(std::span<const float>(v), {1, 3, 32, 32});
    const Tensor raw = m->image->embed_images(pixels).contiguous();
    const std::vector<float> want = normalised(std::span<const float>(raw.data<float>(), size_t(d)));
    EXPECT_LT(max_abs_diff(std::span<const float>(got).subspan(i * size_t(d), size_t(d)), want), 1e-6) << i;
  }
}

TEST_P(EmbedImagesFamily, VectorsMatchThePyTorchReference) {
  auto fe = frontend(GetParam());
  ASSERT_TRUE(fe);
  MediaCache::shared().clear();
  auto ref = test::open_reference(fe->model_dir());
  ASSERT_TRUE(ref.has_value()) << ref.status().to_string();
  Result<Tensor> pixels = ref.value()->get("pixel_values");
  Result<Tensor> image_embeds = ref.value()->get("image_embeds");
  Result<Tensor> token_ids = ref.value()->get("token_ids");
  Result<Tensor> cu_seqlens = ref.value()->get("cu_seqlens");
  Result<Tensor> text_embeds = ref.value()->get("text_embeds");
  ASSERT_TRUE(pixels.has_value() && image_embeds.has_value() && token_ids.has_value() && cu_seqlens.has_value() &&
              text_embeds.has_value());
  Result<std::unique_ptr<Embedder>> e = Embedder::load(fe, {});
  ASSERT_TRUE(e.has_value()) << e.status().to_string();
  const int64_t d = fe->dims();

  // Images: the reference's pixel values as preprocessed views.
  const int64_t num_views = pixels->size(0), view = 3 * 32 * 32;
  const Tensor px = pixels->contiguous();
  std::vector<frontends::EmbedImage> images;
  for (int64_t v = 0; v < num_views; ++v) {
    auto views = std::make_shared<media::PixelViews>();
    views->side = 32;
    views->num_views = 1;
    views->values.assign(px.data<float>() + v * view, px.data<float>() + (v + 1) * view);
    images.push_back({size_t(v), views, media::MediaKey{uint64_t(v) + 1, 77}});
  }
  const std::vector<float> got_images = embed_images(*e.value(), images);
  // Texts: the reference's token ids, each run at its own length as the reference ran it
  // (the first is max_tokens long, as SigLIP's padded inputs are: check_ids leaves it as is).
  const Tensor ids = token_ids->contiguous(), cu = cu_seqlens->contiguous();
  std::vector<std::vector<int32_t>> texts;
  for (int64_t t = 0; t + 1 < cu.size(0); ++t)
    texts.emplace_back(ids.data<int32_t>() + cu.data<int32_t>()[t], ids.data<int32_t>() + cu.data<int32_t>()[t + 1]);
  ASSERT_EQ(int64_t(texts[0].size()), fe->max_tokens());
  Result<std::vector<int32_t>> checked = fe->check_ids(std::vector<int64_t>(texts[0].begin(), texts[0].end()), false);
  ASSERT_TRUE(checked.has_value());
  EXPECT_EQ(*checked, texts[0]);
  const std::vector<float> got_texts = e.value()->embed(texts);

  const auto expect_rows = [&](const std::vector<float>& got, const Tensor& want_raw, const char* what) {
    const Tensor want = want_raw.contiguous();
    ASSERT_EQ(int64_t(got.size()), want.size(0) * d) << what;
    std::vector<float> want_normalised;
    for (int64_t r = 0; r < want.size(0); ++r) {
      const std::vector<float> row = normalised(std::span<const float>(want.data<float>() + r * d, size_t(d)));
      want_normalised.insert(want_normalised.end(), row.begin(), row.end());
    }
    EXPECT_TRUE(test::rel_error_within(Tensor::from(std::span<const float>(got), {want.size(0), d}),
                                       Tensor::from(std::span<const float>(want_normalised), {want.size(0), d}), 1e-4))
        << what;
  };
  expect_rows(got_images, *image_embeds, "image embeds");
  expect_rows(got_texts, *text_embeds, "text embeds");
}

INSTANTIATE_TEST_SUITE_P(Families, EmbedImagesFamily, ::testing::Values("clip", "siglip"),
                         [](const auto& info) { return info.param; });

TEST(EmbedImagesEmbedder, CacheHitSkipsTheTower) {
  auto fe = frontend("clip");
  ASSERT_TRUE(fe);
  MediaCache::shared().clear();
  CountedEmbedder c = counted_embedder(fe);
  ASSERT_TRUE(c.embedder);
  EXPECT_EQ(c.embedder->image_encoder_id(), fe->model_dir() + "|f32|image-embed");
  const frontends::EmbedImage a = prepared(*fe, 10), b = prepared(*fe, 11);

  const MediaCacheStats before = MediaCache::shared().stats();
  EmbedStats first;
  const std::vector<float> cold = embed_images(*c.embedder, {a, b}, &first);
  EXPECT_EQ(c.views->load(), 2);
  EXPECT_EQ(first.images, 2);
  EXPECT_EQ(first.images_encoded, 2);
  EXPECT_EQ(first.cache_hits, 0);

  EmbedStats second;
  const std::vector<float> warm = embed_images(*c.embedder, {b, a}, &second);
  EXPECT_EQ(c.views->load(), 2) << "a cache hit must not run the tower";
  EXPECT_EQ(second.cache_hits, 2);
  EXPECT_EQ(second.images_encoded, 0);
  const MediaCacheStats after = MediaCache::shared().stats();
  EXPECT_EQ(after.lookups - before.lookups, 4);
  EXPECT_EQ(after.hits - before.hits, 2);
  EXPECT_EQ(after.inserts - before.inserts, 2);
  const size_t d = size_t(fe->dims());
  EXPECT_EQ(max_abs_diff(std::span<const float>(warm).subspan(0, d), std::span<const float>(cold).subspan(d, d)), 0.0);
  EXPECT_EQ(max_abs_diff(std::span<const float>(warm).subspan(d, d), std::span<const float>(cold).subspan(0, d)), 0.0);

  // A repeated image within one call runs once; a cached one, never.
  const frontends::EmbedImage n = prepared(*fe, 12);
  EmbedStats third;
  const std::vector<float> repeated = embed_images(*c.embedder, {n, a, n}, &third);
  EXPECT_EQ(c.views->load(), 3);
  EXPECT_EQ(third.images_encoded, 1);
  EXPECT_EQ(third.cache_hits, 1);
  EXPECT_EQ(max_abs_diff(std::span<const float>(repeated).subspan(0, d), std::span<const float>(repeated).subspan(2 * d, d)),
            0.0);
}

TEST(EmbedImagesEmbedder, AnotherPrecisionIsAnotherCacheEntry) {
  auto fe = frontend("clip");
  ASSERT_TRUE(fe);
  MediaCache::shared().clear();
  EmbedderOptions bf16;
  bf16.precision = ops::Precision::bf16;
  CountedEmbedder f32 = counted_embedder(fe), low = counted_embedder(fe, bf16);
  ASSERT_TRUE(f32.embedder && low.embedder);
  EXPECT_NE(f32.embedder->image_encoder_id(), low.embedder->image_encoder_id());
  const frontends::EmbedImage a = prepared(*fe, 20);
  const std::vector<float> exact = embed_images(*f32.embedder, {a});
  const std::vector<float> approx = embed_images(*low.embedder, {a});
  EXPECT_EQ(low.views->load(), 1);  // not served from the f32 entry
  double dot = 0;
  for (size_t i = 0; i < exact.size(); ++i) dot += double(exact[i]) * approx[i];
  EXPECT_GT(dot, 0.99);  // unit vectors: cosine
}

TEST(EmbedImagesEmbedder, ImagesRunInMicroBatchesInInputOrder) {
  auto fe = frontend("siglip");
  ASSERT_TRUE(fe);
  MediaCache::shared().clear();
  EmbedderOptions two;
  two.max_batch_images = 2;
  CountedEmbedder batched = counted_embedder(fe, two), single = counted_embedder(fe);
  ASSERT_TRUE(batched.embedder && single.embedder);
  std::vector<frontends::EmbedImage> images;
  for (int i = 0; i < 5; ++i) images.push_back(prepared(*fe, 30 + i, 32 + i, 40 - i));
  EmbedStats stats;
  const std::vector<float> got = embed_images(*batched.embedder, images, &stats);
  EXPECT_EQ(batched.calls->load(), 3);  // 2 + 2 + 1
  EXPECT_EQ(stats.image_batches, 3);
  MediaCache::shared().clear();
  const size_t d = size_t(fe->dims());
  for (size_t i = 0; i < images.size(); ++i) {
    const std::vector<float> one = embed_images(*single.embedder, {images[i]});
    EXPECT_LT(max_abs_diff(std::span<const float>(got).subspan(i * d, d), one), 1e-6) << i;
  }
}

TEST(EmbedImagesEmbedder, MatryoshkaImageVectorsAreCutThenNormalised) {
  auto fe = frontend("clip", knobs_of({{"matryoshka_dims", std::string("48,16")}}));
  ASSERT_TRUE(fe);
  MediaCache::shared().clear();
  CountedEmbedder c = counted_embedder(fe);
  ASSERT_TRUE(c.embedder);
  const frontends::EmbedImage a = prepared(*fe, 40);
  const std::vector<float> full = embed_images(*c.embedder, {a});
  const std::vector<float> cut = embed_images(*c.embedder, {a}, nullptr, 16);
  EXPECT_EQ(c.views->load(), 1);  // the cache holds the full vector: any dims reuses it
  ASSERT_EQ(cut.size(), 16u);
  EXPECT_NEAR(norm(cut), 1.0, 1e-5);
  EXPECT_LT(max_abs_diff(cut, normalised(std::span<const float>(full).subspan(0, 16))), 1e-6);
}

TEST(EmbedImagesEmbedder, CreateChecksTheTowers) {
  auto fe = frontend("clip");
  ASSERT_TRUE(fe);
  Result<models::DualEncoderModel> m = models::load_dual_encoder(fe->model_dir(), ops::Precision::f32);
  ASSERT_TRUE(m.has_value());
  Result<std::unique_ptr<Embedder>> no_tower = Embedder::create(fe, {}, std::move(m->text));
  ASSERT_FALSE(no_tower.has_value());
  EXPECT_NE(no_tower.status().message().find("image tower"), std::string::npos);
}

// ---- the engine ----

class Waiter {
 public:
  serving::Completion completion() {
    return [this](Result<serving::PayloadPtr> r) {
      std::lock_guard lock(mu_);
      status_ = r.status();
      if (r.has_value())
        if (auto* out = dynamic_cast<frontends::EmbedOutput*>(r.value().get())) output_ = *out;
      done_ = true;
      cv_.notify_all();
    };
  }
  bool wait() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return done_; });
  }
  Status status_;
  frontends::EmbedOutput output_;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
};

struct DualDeployment {
  explicit DualDeployment(const std::string& family, serving::Knobs knobs = {}) {
    serving::DeploymentConfig c;
    c.name = "dual";
    c.task = "embed";
    c.model = model_dir(family);
    c.knobs = std::move(knobs);
    d = std::make_unique<serving::Deployment>(
        c, serving::EngineKind(embed_engine_factory(), embed_frontend_factory()), metrics);
    d->start();
    const Status s = d->wait_ready();
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ~DualDeployment() { d->stop(); }
  const frontends::EmbedFrontend& frontend() const { return dynamic_cast<const frontends::EmbedFrontend&>(*d->frontend()); }

  serving::MetricsRegistry metrics;
  std::unique_ptr<serving::Deployment> d;
};

// Texts "a cat", "a dog" at positions 0 and 2, images at 1 and 3.
std::unique_ptr<frontends::EmbedInput> mixed_input(const frontends::EmbedFrontend& fe, int seed) {
  auto in = std::make_unique<frontends::EmbedInput>();
  for (const char* t : {"a cat", "a dog"}) {
    Result<std::vector<int32_t>> ids = fe.tokenize(t, false);
    EXPECT_TRUE(ids.has_value());
    in->sequences.push_back(ids.has_value() ? *ids : std::vector<int32_t>{});
  }
  for (size_t k = 0; k < 2; ++k) {
    frontends::EmbedImage im = prepared(fe, seed + int(k));
    im.index = 2 * k + 1;
    in->images.push_back(std::move(im));
  }
  return in;
}

void expect_mixed_rows(const frontends::EmbedOutput& out, const frontends::EmbedFrontend& fe, int seed) {
  const size_t d = size_t(fe.dims());
  ASSERT_EQ(out.dims, fe.dims());
  ASSERT_EQ(out.vectors.size(), 4 * d);
  // What each input is alone, straight through an embedder of the same weights.
  Result<std::unique_ptr<Embedder>> e = Embedder::load(std::shared_ptr<const frontends::EmbedFrontend>(&fe, [](auto*) {}), {});
  ASSERT_TRUE(e.has_value());
  std::vector<std::vector<int32_t>> texts;
  for (const char* t : {"a cat", "a dog"}) texts.push_back(*fe.tokenize(t, false));
  const std::vector<float> text = e.value()->embed(texts);
  const std::vector<float> image = embed_images(*e.value(), {prepared(fe, seed), prepared(fe, seed + 1)});
  const std::span<const float> rows(out.vectors);
  EXPECT_LT(max_abs_diff(rows.subspan(0, d), std::span<const float>(text).subspan(0, d)), 1e-6);
  EXPECT_LT(max_abs_diff(rows.subspan(d, d), std::span<const float>(image).subspan(0, d)), 1e-6);
  EXPECT_LT(max_abs_diff(rows.subspan(2 * d, d), std::span<const float>(text).subspan(d, d)), 1e-6);
  EXPECT_LT(max_abs_diff(rows.subspan(3 * d, d), std::span<const float>(image).subspan(d, d)), 1e-6);
}

TEST(EmbedImagesEngine, MixedInputsKeepTheirOrder) {
  DualDeployment f("clip");
  Waiter w;
  auto in = mixed_input(f.frontend(), 50);
  serving::RequestPtr r = serving::make_request(std::move(in), w.completion());
  r->cost_tokens = 10;
  ASSERT_TRUE(f.d->submit(r).ok());
  ASSERT_TRUE(w.wait());
  ASSERT_TRUE(w.status_.ok()) << w.status_.to_string();
  expect_mixed_rows(w.output_, f.frontend(), 50);
  const std::string metrics = f.metrics.render();
  EXPECT_NE(metrics.find("prism_embed_images_total{"), std::string::npos);
  EXPECT_NE(metrics.find("prism_media_cache_lookups_total{"), std::string::npos);
  const nlohmann::json info = f.d->info().engine;
  EXPECT_EQ(info.value("accepts_images", false), true) << info.dump();
}

TEST(EmbedImagesEngine, BulkChunksMixTextsAndImages) {
  DualDeployment f("siglip", knobs_of({{"bulk_chunk_tokens", int64_t{20}}}));  // an image costs 16
  Waiter w;
  serving::RequestPtr r = serving::make_request(mixed_input(f.frontend(), 60), w.completion());
  r->lane = serving::Lane::bulk;
  r->cost_tokens = 64;
  ASSERT_TRUE(f.d->submit(r).ok());
  ASSERT_TRUE(w.wait());
  ASSERT_TRUE(w.status_.ok()) << w.status_.to_string();
  expect_mixed_rows(w.output_, f.frontend(), 60);
}

TEST(EmbedImagesEngine, BadImagePayloadFailsAlone) {
  DualDeployment f("clip");
  Waiter bad, good;
  auto in = mixed_input(f.frontend(), 70);
  auto small = std::make_shared<media::PixelViews>();
  small->side = 16;
  small->num_views = 1;
  small->values.assign(3 * 16 * 16, 0.0f);
  in->images[1].views = small;  // input[3]
  ASSERT_TRUE(f.d->submit(serving::make_request(std::move(in), bad.completion())).ok());
  ASSERT_TRUE(f.d->submit(serving::make_request(mixed_input(f.frontend(), 70), good.completion())).ok());
  ASSERT_TRUE(bad.wait() && good.wait());
  ASSERT_FALSE(bad.status_.ok());
  EXPECT_EQ(bad.status_.code(), StatusCode::invalid_argument);
  EXPECT_EQ(bad.status_.message().rfind("input[3] ", 0), 0u) << bad.status_.message();
  ASSERT_TRUE(good.status_.ok()) << good.status_.to_string();
  expect_mixed_rows(good.output_, f.frontend(), 70);
}

TEST(EmbedImagesEngine, TextOnlyModelRefusesImagePayloads) {
  serving::DeploymentConfig c;
  c.name = "bert";
  c.task = "embed";
  c.model = test::FakeModelDir{}.write("embed_images_engine_bert");
  EncoderLoader loader = [](const frontends::EmbedFrontend& fe, ops::Precision) -> Result<std::unique_ptr<models::Encoder>> {
    return std::unique_ptr<models::Encoder>(std::make_unique<test::FakeEncoder>(16, fe.max_tokens()));
  };
  serving::MetricsRegistry metrics;
  serving::Deployment d(c, serving::EngineKind(embed_engine_factory(loader), embed_frontend_factory()), metrics);
  d.start();
  ASSERT_TRUE(d.wait_ready().ok());
  auto in = std::make_unique<frontends::EmbedInput>();
  in->sequences = {{101, 7592, 102}};
  frontends::EmbedImage im;
  im.index = 0;
  im.views = std::make_shared<media::PixelViews>();
  in->images.push_back(im);
  Waiter w;
  ASSERT_TRUE(d.submit(serving::make_request(std::move(in), w.completion())).ok());
  ASSERT_TRUE(w.wait());
  EXPECT_EQ(w.status_.code(), StatusCode::failed_precondition);
  EXPECT_EQ(w.status_.message().rfind("input[0] is an image", 0), 0u) << w.status_.message();
  d.stop();
}

}  // namespace
}  // namespace prism::engines::encode
