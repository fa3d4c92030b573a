// Tokenizer throughput on the real BERT and GPT-2 vocabularies: 100k short documents
// (sequential, and encode_batch over the OpenMP pool with 1 thread and with all of them) and a
// few 1 MB documents, with the per-MB time of 1 MB vs 100 KB documents to show cost is linear
// in input size. Ceiling, measured in the same run: UTF-8 validation of the same bytes (the
// least any tokenizer must do per byte). CPU seconds are printed next to wall seconds: on a
// shared machine a thread that is not scheduled shows as wall time, not CPU time.
#include <omp.h>
#include <time.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "text/utf8.h"

namespace {

using Clock = std::chrono::steady_clock;
using prism::text::Tokenizer;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char* kSentences[] = {
    "The quick brown fox jumps over the lazy dog.",
    "Prism serves embeddings, chat and speech models from one binary.",
    "Tokenization cost should grow linearly with the size of the input text.",
    "Héllo wörld — naïve café résumé, 1234567 and 3.14159!",
    "你好，世界！这是一个测试。",
    "Emoji 😀🎉 and mixed scripts: Ελληνικά русский العربية.",
    "    indented code: for (int i = 0; i < n; ++i) { sum += x[i]; }",
};

std::vector<std::string> short_docs(size_t n) {
  std::mt19937 rng(1);
  std::vector<std::string> docs(n);
  for (auto& d : docs) {
    const int k = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < k; ++i) d += std::string(kSentences[rng() % 7]) + " ";
    d += std::to_string(rng() % 100000);
  }
  return docs;
}

std::string long_doc(size_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  std::string d;
  while (d.size() < bytes) d += std::string(kSentences[rng() % 7]) + (rng() % 8 == 0 ? "\n\n" : " ");
  return d;
}

size_t total_bytes(const std::vector<std::string>& docs) {
  size_t n = 0;
  for (const auto& d : docs) n += d.size();
  return n;
}

// UTF-8 validation of every document: MB/s.
double ceiling_mb_s(const std::vector<std::string>& docs) {
  const auto t0 = Clock::now();
  size_t valid = 0;
  for (int rep = 0; rep < 5; ++rep)
    for (const auto& d : docs) valid += prism::text::is_valid_utf8(d);
  const double s = seconds_since(t0) / 5;
  if (valid == 0) std::printf("(no valid docs)\n");
  return total_bytes(docs) / 1e6 / s;
}

void bench(const char* name, const Tokenizer& t) {
  const auto docs = short_docs(100000);
  const double mb = total_bytes(docs) / 1e6;
  const double ceiling = ceiling_mb_s(docs);

  auto t0 = Clock::now();
  double c0 = cpu_seconds();
  size_t tokens = 0;
  for (const auto& d : docs) tokens += t.encode(d).size();
  const double seq = seconds_since(t0), seq_cpu = cpu_seconds() - c0;

  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  t0 = Clock::now();
  c0 = cpu_seconds();
  size_t batch_tokens = 0;
  for (const auto& e : t.encode_batch(docs)) batch_tokens += e.size();
  const double one = seconds_since(t0), one_cpu = cpu_seconds() - c0;
  omp_set_num_threads(threads);

  t0 = Clock::now();
  c0 = cpu_seconds();
  for (const auto& e : t.encode_batch(docs)) batch_tokens -= e.size();
  const double par = seconds_since(t0), par_cpu = cpu_seconds() - c0;
  if (batch_tokens != 0) std::printf("(batch results differ between 1 and %d threads)\n", threads);

  std::printf("%-6s 100k short docs (%.1f MB, %.1f tokens/doc)\n", name, mb, static_cast<double>(tokens) / docs.size());
  std::printf("  %-30s %9.0f docs/s %7.2f MB/s  %.3f of ceiling   (%.2f s wall, %.2f s CPU)\n", "encode, 1 thread",
              docs.size() / seq, mb / seq, mb / seq / ceiling, seq, seq_cpu);
  std::printf("  %-30s %9.0f docs/s %7.2f MB/s                    (%.2f s wall, %.2f s CPU)\n",
              "encode_batch, 1 thread", docs.size() / one, mb / one, one, one_cpu);
  std::printf("  %-30s %9.0f docs/s %7.2f MB/s  %.2fx vs 1 thread (%.2f s wall, %.2f s CPU)\n",
              ("encode_batch, " + std::to_string(threads) + " threads").c_str(), docs.size() / par, mb / par, one / par,
              par, par_cpu);

  // Linearity: the same 4 MB as 4 x 1 MB or 40 x 100 KB documents, one thread each.
  for (size_t size : {size_t(100) << 10, size_t(1) << 20}) {
    const size_t count = (size_t(4) << 20) / size;
    std::vector<std::string> big;
    for (size_t i = 0; i < count; ++i) big.push_back(long_doc(size, static_cast<unsigned>(i)));
    const double big_mb = total_bytes(big) / 1e6;
    t0 = Clock::now();
    size_t n = 0;
    for (const auto& d : big) n += t.encode(d).size();
    const double s = seconds_since(t0);
    std::printf("  %zu x %4zu KB docs %18s %8.2f MB/s  %.1f ms per MB (%zu tokens)\n", count, size >> 10, "",
                big_mb / s, 1e3 * s / big_mb, n);
  }
  std::printf("  ceiling (UTF-8 validation)   %28.1f MB/s\n", ceiling);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : "../shared/testdata/tokenizers";
  for (const char* name : {"bert-uncased", "gpt2"}) {
    auto t = Tokenizer::load(dir + "/" + name + "/tokenizer.json");
    if (!t) {
      std::fprintf(stderr, "%s: %s\n", name, t.status().to_string().c_str());
      return 1;
    }
    bench(name, *t);
  }
  return 0;
}
