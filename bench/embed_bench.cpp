// embed_bench: bulk and single-query embedding speed of Prism's encode path against the
// PyTorch peer (bench/embed_peer.py: sentence-transformers' loop on the same weights), and
// each precision's quality (cosine against Prism's f32 vectors), all in one run.
//
//   build/bench/embed_bench --model DIR [--docs N] [--seed S] [--no-peer] [--sweep]
//
// DIR is a BERT-family checkpoint, e.g. real-size random weights from (one command)
//   /usr/bin/python3 tests/reference/bert_family.py --layout minilm --out /tmp/minilm
//       --hidden 384 --layers 6 --heads 12 --intermediate 1536 --no-reference
// The corpus is random token ids with a realistic length mix: 16..256 tokens log-uniform,
// plus 2% at 512 (capped at the model's maximum), [CLS] ... [SEP] framed.
// Every figure is a ratio against a peer measured in the same run: the machine is shared.
// Without PRISM_ISA the whole run is repeated on every instruction-set tier the CPU has, each in
// a process of its own (bench/bench_tiers.h); PRISM_ISA=avx2|avx512|avx512_bf16 runs one.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "bench/bench_tiers.h"
#include "engines/encode/embedder.h"
#include "pipelines/search/vector_index.h"
#include "models/encoder.h"
#include "runtime/gemm_peak.h"
#include "runtime/threads.h"

namespace {

using prism::engines::encode::EmbedderOptions;
using prism::frontends::EmbedFrontend;
using prism::engines::encode::Embedder;
using prism::engines::encode::EmbedStats;
using prism::ops::Precision;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Corpus {
  std::vector<std::vector<int32_t>> docs;
  std::vector<int32_t> query;  // a 16-token query
  int64_t tokens = 0;
};

std::vector<int32_t> random_sequence(const EmbedFrontend& fe, int64_t length, std::mt19937& rng) {
  const auto& sp = fe.tokenizer().special_token_ids();
  const int32_t first = sp.cls ? *sp.cls : sp.bos ? *sp.bos : 0;
  const int32_t last = sp.sep ? *sp.sep : sp.eos ? *sp.eos : 0;
  const int32_t lo = std::min<int64_t>(1000, fe.vocab_size() / 2);
  std::uniform_int_distribution<int32_t> id(lo, static_cast<int32_t>(fe.vocab_size() - 1));
  std::vector<int32_t> s(static_cast<size_t>(length));
  for (auto& t : s) t = id(rng);
  s.front() = first;
  s.back() = last;
  return s;
}

Corpus make_corpus(const EmbedFrontend& fe, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(std::log(16.0), std::log(256.0));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  Corpus c;
  for (int i = 0; i < n; ++i) {
    int64_t len = coin(rng) < 0.02 ? 512 : static_cast<int64_t>(std::exp(u(rng)));
    len = std::min(len, fe.max_tokens());
    c.docs.push_back(random_sequence(fe, len, rng));
    c.tokens += len;
  }
  c.query = random_sequence(fe, 16, rng);
  return c;
}

struct Run {
  double docs_per_s = 0, useful_gflops = 0, query_ms = 0, pad_fraction = 0;
  std::vector<float> vectors;
};

// One bulk pass (after a warm-up on a slice) and the median of `reps` single-query calls.
Run run_prism(Embedder& e, const Corpus& c, int reps = 30) {
  Run r;
  e.embed(std::span(c.docs).first(std::min<size_t>(c.docs.size(), 32)));
  EmbedStats stats;
  const auto t0 = Clock::now();
  r.vectors = e.embed(c.docs, 0, &stats);
  const double s = seconds_since(t0);
  r.docs_per_s = double(c.docs.size()) / s;
  r.useful_gflops = stats.useful_flops / s * 1e-9;
  r.pad_fraction = stats.padded_tokens > 0 ? 1.0 - double(stats.real_tokens) / double(stats.padded_tokens) : 0.0;
  std::vector<double> lat;
  const std::vector<std::vector<int32_t>> q{c.query};
  for (int i = 0; i < reps; ++i) {
    const auto t1 = Clock::now();
    e.embed(q);
    lat.push_back(seconds_since(t1) * 1e3);
  }
  std::sort(lat.begin(), lat.end());
  r.query_ms = lat[lat.size() / 2];
  return r;
}

struct Cosines {
  double mean = 0, min = 1;
};
Cosines cosines(const std::vector<float>& a, const std::vector<float>& b, int64_t dims) {
  Cosines c;
  const int64_t n = static_cast<int64_t>(a.size()) / dims;
  for (int64_t i = 0; i < n; ++i) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t d = 0; d < dims; ++d) {
      const double x = a[i * dims + d], y = b[i * dims + d];
      ab += x * y, aa += x * x, bb += y * y;
    }
    const double cs = ab / std::sqrt(std::max(aa * bb, 1e-30));
    c.mean += cs / double(n);
    c.min = std::min(c.min, cs);
  }
  return c;
}

struct PeerRun {
  bool ok = false;
  double docs_per_s = 0, query_ms = 0;
  std::vector<float> vectors;
};

// The vectors of a float32 [rows, cols] .npy written by numpy.save; empty when unreadable
// (the caller then skips the comparison).
std::vector<float> read_npy(const std::string& path) {
  prism::Result<std::string> data = prism::read_file(path);
  if (!data.has_value()) return {};
  prism::Result<prism::pipelines::search::NpyF32Shape> shape = prism::pipelines::search::parse_npy_f32_header(*data);
  if (!shape.has_value()) return {};
  const size_t n = static_cast<size_t>(shape->rows * shape->cols);
  if (data->size() < static_cast<size_t>(shape->data_offset) + n * sizeof(float)) return {};
  std::vector<float> v(n);
  std::memcpy(v.data(), data->data() + shape->data_offset, n * sizeof(float));
  return v;
}

PeerRun run_peer(const std::string& model, const std::string& dtype, const std::string& corpus_path) {
  const std::string dir = std::filesystem::path(corpus_path).parent_path().string();
  const std::string out = dir + "/peer_" + dtype + ".json", vecs = dir + "/peer_" + dtype + ".npy";
  const std::string cmd = "OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 " PRISM_SOURCE_DIR "/bench/embed_peer.py --model '" +
                          model + "' --corpus '" + corpus_path + "' --out '" + out + "' --dtype " + dtype +
                          " --vectors '" + vecs + "' --threads " + std::to_string(prism::num_threads());
  PeerRun p;
  if (std::system(cmd.c_str()) != 0) return p;
  std::ifstream f(out);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded()) return p;
  p.ok = true;
  p.docs_per_s = j["docs_per_s"].get<double>();
  p.query_ms = j["query_ms_median"].get<double>();
  p.vectors = read_npy(vecs);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::optional<int> done = prism::bench::run_on_each_tier(argc, argv)) return *done;
  std::string model;
  int n_docs = 256;
  uint32_t seed = 7;
  bool peer = true, sweep = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model" && i + 1 < argc) model = argv[++i];
    else if (a == "--docs" && i + 1 < argc) n_docs = std::atoi(argv[++i]);
    else if (a == "--seed" && i + 1 < argc) seed = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--no-peer") peer = false;
    else if (a == "--sweep") sweep = true;
    else {
      std::fprintf(stderr, "usage: embed_bench --model DIR [--docs N] [--seed S] [--no-peer] [--sweep]\n");
      return 2;
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "embed_bench: --model DIR is required\n");
    return 2;
  }
  prism::set_num_threads(0);
  auto fe = EmbedFrontend::load(model);
  if (!fe.has_value()) {
    std::fprintf(stderr, "embed_bench: %s\n", fe.status().to_string().c_str());
    return 1;
  }
  const Corpus corpus = make_corpus(**fe, n_docs, seed);
  const int64_t dims = (*fe)->dims();
  std::printf("model %s: %lld dims, %d docs, %lld tokens (mean %.0f), %d threads, %s kernels\n", model.c_str(),
              static_cast<long long>(dims), n_docs, static_cast<long long>(corpus.tokens),
              double(corpus.tokens) / n_docs, prism::num_threads(),
              std::string(prism::isa_name(prism::active_isa())).c_str());

  const std::string tmp = std::filesystem::temp_directory_path() / ("prism_embed_bench_" + std::to_string(getpid()));
  std::filesystem::create_directories(tmp);
  const std::string corpus_path = tmp + "/corpus.json";
  {
    nlohmann::json j;
    j["sequences"] = corpus.docs;
    j["query"] = corpus.query;
    std::ofstream(corpus_path) << j.dump();
  }

  // Prism at each precision, its GEMM ceiling measured right before.
  std::vector<float> f32_vectors;
  struct Row {
    std::string name;
    Run run;
    double peak = 0;
  };
  std::vector<Row> rows;
  for (Precision p : {Precision::f32, Precision::bf16, Precision::int8}) {
    EmbedderOptions o;
    o.precision = p;
    auto e = Embedder::load(*fe, o);
    if (!e.has_value()) {
      std::fprintf(stderr, "embed_bench: %s\n", e.status().to_string().c_str());
      return 1;
    }
    const prism::Result<double> peak_r = prism::measure_gemm_peak(p);
    const double peak = peak_r.has_value() ? *peak_r : 0.0;
    rows.push_back({std::string(prism::ops::precision_name(p)), run_prism(**e, corpus), peak});
  }
  PeerRun peer_f32, peer_bf16;
  if (peer) {
    peer_f32 = run_peer(model, "f32", corpus_path);
    peer_bf16 = run_peer(model, "bf16", corpus_path);
    if (!peer_f32.ok || !peer_bf16.ok) std::fprintf(stderr, "embed_bench: the PyTorch peer failed\n");
  }

  // Each precision against its own GEMM peak and against the tier's f32 peak (rows[0]).
  std::printf("\n%-6s %10s %12s %10s %12s %11s %10s %11s %9s %9s\n", "prec", "docs/s", "vs peer", "GFLOP/s",
              "of GEMM peak", "of f32 peak", "query ms", "vs peer", "cos mean", "cos min");
  const std::vector<float>& ref = rows[0].run.vectors;
  for (const Row& r : rows) {
    // int8 is judged against the peer's bf16 (the target), f32/bf16 against the same.
    const PeerRun& pr = r.name == "f32" ? peer_f32 : peer_bf16;
    const Cosines cs = cosines(r.run.vectors, ref, dims);
    std::printf("%-6s %10.1f %11.2fx %10.1f %11.0f%% %10.0f%% %10.2f %10.2fx %9.5f %9.5f\n", r.name.c_str(),
                r.run.docs_per_s, pr.ok ? r.run.docs_per_s / pr.docs_per_s : 0.0, r.run.useful_gflops,
                r.peak > 0 ? 100.0 * r.run.useful_gflops / r.peak : 0.0,
                rows[0].peak > 0 ? 100.0 * r.run.useful_gflops / rows[0].peak : 0.0, r.run.query_ms,
                pr.ok ? r.run.query_ms / pr.query_ms : 0.0, cs.mean, cs.min);
  }
  if (peer_f32.ok) {
    std::printf("peer   f32 %.1f docs/s, query %.2f ms; bf16 %.1f docs/s, query %.2f ms\n", peer_f32.docs_per_s,
                peer_f32.query_ms, peer_bf16.docs_per_s, peer_bf16.query_ms);
    if (peer_f32.vectors.size() == ref.size()) {
      const Cosines cs = cosines(peer_f32.vectors, ref, dims);
      std::printf("prism f32 vs peer f32 vectors: cos mean %.6f min %.6f (same weights: should be 1)\n", cs.mean,
                  cs.min);
    }
    if (peer_bf16.vectors.size() == ref.size()) {
      const Cosines cs = cosines(peer_bf16.vectors, ref, dims);
      std::printf("peer bf16 vs prism f32 vectors: cos mean %.5f min %.5f\n", cs.mean, cs.min);
    }
  }
  std::printf("(vs peer: docs/s ratio, higher is better; query ratio, lower is better; int8 is compared with the peer's bf16)\n");

  if (sweep) {
    std::printf("\nbatching effect (bf16): docs/s against max_batch_tokens, packed and padded\n");
    std::printf("%-18s %10s %10s %10s\n", "max_batch_tokens", "packed", "padded", "pad share");
    for (int64_t budget : {512, 2048, 8192, 32768}) {
      double dps[2] = {0, 0}, pad = 0;
      for (int packed = 1; packed >= 0; --packed) {
        EmbedderOptions o;
        o.precision = Precision::bf16;
        o.max_batch_tokens = budget;
        o.packed = packed == 1;
        auto e = Embedder::load(*fe, o);
        if (!e.has_value()) return 1;
        const Run r = run_prism(**e, corpus, 1);
        dps[packed] = r.docs_per_s;
        if (!packed) pad = r.pad_fraction;
      }
      std::printf("%-18lld %10.1f %10.1f %9.0f%%\n", static_cast<long long>(budget), dps[1], dps[0], 100 * pad);
    }
  }
  std::filesystem::remove_all(tmp);
  return 0;
}
