// bench/server_overhead_bench.cpp: the yardstick for the server's per-request overhead: the
// lightest model call Prism serves, a MiniLM-L6 embedding (all-MiniLM-L6-v2 shape: 6 layers,
// hidden 384, 12 heads x 32, intermediate 1536, vocab 30522) of one short sentence (8 tokens),
// built from runtime ops with random weights (speed does not depend on their values). Given
// the port of a running `prism serve` with an "echo" deployment (bench/server_bench.sh starts
// one), it also measures the server's overhead per request and prints it as a fraction of
// that call; the target is < 5%.
// NOTE: overhead = median HTTP round trip of POST /v1/prism/echo (keep-alive, one request at
// a time, zero engine delay) minus the median round trip of the same bytes over a bare
// loopback TCP ping-pong measured in the same run: what is left is the server's parse,
// route, queue, batch, replica hand-off, JSON and respond, not the kernel's loopback.
// Usage: server_overhead_bench [--port PORT] [--tokens N] [--requests N]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/arena.h"
#include "runtime/ops.h"
#include "runtime/threads.h"

namespace {

using namespace prism;

constexpr int64_t kVocab = 30522, kHidden = 384, kHeads = 12, kHeadDim = 32, kInter = 1536, kLayers = 6;
constexpr int64_t kMaxPositions = 512;
constexpr float kEps = 1e-12f;

Tensor random_f32(const Dims& shape, uint32_t seed, float scale = 0.05f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor t = Tensor::empty(shape, DType::f32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

Tensor ones(int64_t n) {
  Tensor t = Tensor::empty({n}, DType::f32);
  std::fill_n(t.data<float>(), n, 1.0f);
  return t;
}

ops::LinearWeight linear_weight(int64_t out, int64_t in, uint32_t seed) {
  Result<ops::LinearWeight> w = ops::pack_linear(random_f32({out, in}, seed), random_f32({out}, seed + 1), ops::Precision::f32);
  if (!w.has_value()) {
    std::fprintf(stderr, "pack_linear: %s\n", w.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(w).value();
}

struct Layer {
  ops::LinearWeight query, key, value, attn_out, intermediate, output;
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;  // [hidden]
};

struct MiniLm {
  Tensor word, position, token_type;  // [vocab | positions | 2, hidden]
  Tensor emb_ln_w, emb_ln_b;
  std::vector<Layer> layers;
};

MiniLm make_model() {
  MiniLm m;
  m.word = random_f32({kVocab, kHidden}, 1);
  m.position = random_f32({kMaxPositions, kHidden}, 2);
  m.token_type = random_f32({2, kHidden}, 3);
  m.emb_ln_w = ones(kHidden);
  m.emb_ln_b = random_f32({kHidden}, 4);
  for (int l = 0; l < kLayers; ++l) {
    const uint32_t s = 100 + 20 * l;
    m.layers.push_back({linear_weight(kHidden, kHidden, s), linear_weight(kHidden, kHidden, s + 2),
                        linear_weight(kHidden, kHidden, s + 4), linear_weight(kHidden, kHidden, s + 6),
                        linear_weight(kInter, kHidden, s + 8), linear_weight(kHidden, kInter, s + 10), ones(kHidden),
                        random_f32({kHidden}, s + 12), ones(kHidden), random_f32({kHidden}, s + 13)});
  }
  return m;
}

// One sentence of T tokens → its mean-pooled, L2-normalised embedding [hidden].
std::vector<float> embed(const MiniLm& m, const Tensor& ids, const Tensor& positions, const Tensor& types,
                         const ops::AttentionSeqs& seqs) {
  const int64_t T = ids.size(0);
  Tensor x = ops::embedding(m.word, ids);           // [T, hidden] f32
  ops::add_(x, ops::embedding(m.position, positions));
  ops::add_(x, ops::embedding(m.token_type, types));
  x = ops::layer_norm(x, m.emb_ln_w, m.emb_ln_b, kEps);
  ops::AttentionParams bidirectional;
  bidirectional.causal = false;
  for (const Layer& L : m.layers) {
    Tensor q = ops::linear(x, L.query).view({T, kHeads, kHeadDim});
    Tensor k = ops::linear(x, L.key).view({T, kHeads, kHeadDim});
    Tensor v = ops::linear(x, L.value).view({T, kHeads, kHeadDim});
    Tensor a = ops::attention(q, k, v, seqs, bidirectional).view({T, kHidden});
    Tensor h = ops::linear(a, L.attn_out);
    ops::add_(h, x);
    x = ops::layer_norm(h, L.ln1_w, L.ln1_b, kEps);
    Tensor f = ops::linear(ops::linear(x, L.intermediate, ops::Activation::gelu_erf), L.output);
    ops::add_(f, x);
    x = ops::layer_norm(f, L.ln2_w, L.ln2_b, kEps);
  }
  std::vector<float> out(kHidden, 0.0f);  // mean pooling, then L2 normalisation
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < kHidden; ++c) out[c] += x.data<float>()[t * kHidden + c] / float(T);
  double norm = 0;
  for (float v : out) norm += double(v) * v;
  for (float& v : out) v = float(v / std::sqrt(std::max(norm, 1e-24)));
  return out;
}

// ---- the HTTP side -------------------------------------------------------------------------

void die(const char* what) {
  std::perror(what);
  std::exit(1);
}

int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) die("connect");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void write_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) die("write");
    off += size_t(n);
  }
}

// Reads one HTTP response (headers + Content-Length body); returns it whole.
std::string read_response(int fd, std::string& buffer) {
  char chunk[4096];
  while (true) {
    size_t end = buffer.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t cl = buffer.find("Content-Length: ");
      size_t length = cl < end ? size_t(std::atoll(buffer.c_str() + cl + 16)) : 0;
      if (buffer.size() >= end + 4 + length) {
        std::string response = buffer.substr(0, end + 4 + length);
        buffer.erase(0, end + 4 + length);
        return response;
      }
    }
    ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) die("read");
    buffer.append(chunk, size_t(n));
  }
}

// Reads exactly n bytes.
void read_exactly(int fd, size_t n) {
  char chunk[4096];
  while (n > 0) {
    ssize_t r = read(fd, chunk, std::min(n, sizeof(chunk)));
    if (r <= 0) die("read");
    n -= size_t(r);
  }
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median µs of one request/response on a keep-alive connection; `response_bytes` gets the
// size of the last response (for the TCP floor).
double http_round_trip_us(int port, const std::string& request, int n, size_t& response_bytes) {
  int fd = connect_loopback(port);
  std::string buffer;
  std::vector<double> us;
  for (int i = 0; i < n + 200; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    write_all(fd, request);
    std::string response = read_response(fd, buffer);
    const auto t1 = std::chrono::steady_clock::now();
    if (response.compare(0, 12, "HTTP/1.1 200") != 0) {
      std::fprintf(stderr, "unexpected response: %s\n", response.c_str());
      std::exit(1);
    }
    response_bytes = response.size();
    if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  close(fd);
  return median_of(us);
}

// Median µs of the same bytes over a bare loopback TCP ping-pong with a thread answering:
// what the kernel and the client cost, without any server work.
double tcp_floor_us(size_t request_bytes, size_t response_bytes, int n) {
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(lfd, 1) != 0) die("bind");
  socklen_t len = sizeof(a);
  getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  const int total = n + 200;
  std::thread server([&] {
    int fd = accept(lfd, nullptr, nullptr);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string reply(response_bytes, 'r');
    for (int i = 0; i < total; ++i) {
      read_exactly(fd, request_bytes);
      write_all(fd, reply);
    }
    close(fd);
  });
  int fd = connect_loopback(ntohs(a.sin_port));
  const std::string request(request_bytes, 'q');
  std::vector<double> us;
  for (int i = 0; i < total; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    write_all(fd, request);
    read_exactly(fd, response_bytes);
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  server.join();
  close(fd);
  close(lfd);
  return median_of(us);
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, requests = 3000;
  int64_t tokens = 8;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--port") && i + 1 < argc) port = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--requests") && i + 1 < argc) requests = std::atoi(argv[++i]);
  }
  const MiniLm model = make_model();
  std::vector<int32_t> id_v(tokens), pos_v(tokens), type_v(tokens, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    id_v[t] = int32_t((t * 7919 + 101) % kVocab);
    pos_v[t] = int32_t(t);
  }
  const Tensor ids = Tensor::from<int32_t>(std::span<const int32_t>(id_v), {tokens});
  const Tensor positions = Tensor::from<int32_t>(std::span<const int32_t>(pos_v), {tokens});
  const Tensor types = Tensor::from<int32_t>(std::span<const int32_t>(type_v), {tokens});
  const Tensor cu = Tensor::from<int32_t>({0, int32_t(tokens)}, {2});
  const ops::AttentionSeqs seqs{cu, cu, Tensor()};

  Arena arena;
  std::vector<double> us;
  float checksum = 0.0f;
  for (int rep = 0; rep < 400; ++rep) {
    ArenaScope scope(&arena);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> e = embed(model, ids, positions, types, seqs);
    const auto t1 = std::chrono::steady_clock::now();
    arena.reset();
    checksum += e[rep % kHidden];
    if (rep >= 20) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());  // after warm-up
  }
  std::sort(us.begin(), us.end());
  const double best = us.front(), median = us[us.size() / 2], p90 = us[us.size() * 9 / 10];
  std::printf("MiniLM-L6 embedding of one %lld-token sentence (f32, %d threads, random weights):\n",
              static_cast<long long>(tokens), num_threads());
  std::printf("  best %8.1f us   median %8.1f us   p90 %8.1f us   (checksum %.3f)\n", best, median, p90, checksum);
  if (port > 0) {
    const std::string body = R"({"model": "echo", "input": "A short sentence of about eight tokens."})";
    const std::string echo = "POST /v1/prism/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    const std::string health = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    size_t echo_response = 0, health_response = 0;
    const double echo_us = http_round_trip_us(port, echo, requests, echo_response);
    const double health_us = http_round_trip_us(port, health, requests, health_response);
    const double floor_us = tcp_floor_us(echo.size(), echo_response, requests);
    const double overhead_us = std::max(0.0, echo_us - floor_us);
    std::printf("round trips at concurrency 1, keep-alive, median of %d:\n", requests);
    std::printf("  loopback TCP ping-pong, same bytes (floor) %8.1f us\n", floor_us);
    std::printf("  GET /health                                %8.1f us\n", health_us);
    std::printf("  POST /v1/prism/echo (echo engine, no delay) %7.1f us\n", echo_us);
    std::printf("server overhead per request (echo - floor):  %8.1f us = %.2f%% of the median MiniLM call "
                "(target < 5%%): %s\n",
                overhead_us, 100.0 * overhead_us / median, overhead_us < 0.05 * median ? "ok" : "OVER TARGET");
    std::printf("  of which the deployment path (echo - /health): %.1f us; whole round trip: %.2f%%\n",
                std::max(0.0, echo_us - health_us), 100.0 * echo_us / median);
  }
  return 0;
}
