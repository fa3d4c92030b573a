// tools/loadgen/load_runner.cpp: closed-loop clients and open-loop arrivals as coroutines on one
// io_context.
#include "tools/loadgen/load_runner.h"

#include <deque>
#include <memory>
#include <optional>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "base/check.h"

namespace prism::tools::loadgen {

namespace net = boost::asio;

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

Clock::duration to_duration(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The message of an OpenAI-shaped error body, else its first line.
std::string error_message(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end()) {
      if (e->is_object() && e->contains("message") && (*e)["message"].is_string()) return (*e)["message"];
      if (e->is_string()) return *e;
    }
  }
  std::string line = body.substr(0, body.find('\n'));
  return line.size() > 200 ? line.substr(0, 200) + "..." : line;
}

class Runner {
 public:
  Runner(net::io_context& io, const ResolvedEndpoint& endpoint, const Workload& workload, const LoadPlan& plan)
      : io_(io), endpoint_(endpoint), workload_(workload), plan_(plan), start_(Clock::now()) {}

  void start(const std::string& metrics_path) {
    if (plan_.warmup_s > 0 && !metrics_path.empty()) net::co_spawn(io_, scrape_at_measure_start(metrics_path), net::detached);
    if (plan_.mode == LoadMode::closed) {
      for (int64_t i = 0; i < plan_.concurrency; ++i) net::co_spawn(io_, closed_client(), net::detached);
    } else {
      net::co_spawn(io_, open_arrivals(), net::detached);
    }
  }

  LoadRecords finish() {
    records_.elapsed_s = seconds_between(start_, Clock::now());
    return std::move(records_);
  }

 private:
  struct Slot {
    uint64_t index = 0;
    bool measured = false;
    Clock::time_point due;
  };

  // Claims the next request index for a request starting at `at`; nullopt when the run is over.
  std::optional<Slot> claim(Clock::time_point at) {
    const RequestPhase phase = request_phase(plan_, seconds_between(start_, at), num_measured_started_);
    if (phase == RequestPhase::stop) return std::nullopt;
    if (phase == RequestPhase::measured) ++num_measured_started_;
    return Slot{next_index_++, phase == RequestPhase::measured, at};
  }

  net::awaitable<void> run_one(HttpConnection& conn, Slot slot) {
    Rng rng = Rng::derive(plan_.seed, kRequestStream, slot.index);
    const BenchRequest request = workload_.make_request(slot.index, rng);
    std::unique_ptr<ResponseMeter> meter = workload_.make_meter(request);
    const Clock::time_point deadline = std::max(Clock::now(), slot.due) + to_duration(plan_.timeout_s);
    const HttpOutcome outcome = co_await conn.exchange(request, *meter, slot.due, deadline);
    const Clock::time_point end = Clock::now();
    if (!slot.measured) {
      ++records_.num_warmup;
      co_return;
    }
    RequestRecord r;
    r.index = slot.index;
    r.start_s = seconds_between(start_, slot.due);
    r.end_s = seconds_between(start_, end);
    r.http_status = outcome.status;
    if (!outcome.ok()) {
      r.error = outcome.error_kind;
      r.error_detail = outcome.error_detail;
    } else if (outcome.status < 200 || outcome.status >= 300) {
      r.error = "http_" + std::to_string(outcome.status);
      r.error_detail = error_message(outcome.body_head);
    } else {
      r.measurement = meter->finish(seconds_between(slot.due, end));
      if (!r.measurement.malformed.empty()) {
        r.error = "malformed";
        r.error_detail = std::move(r.measurement.malformed);
        r.measurement = {};
      }
    }
    if (plan_.mode == LoadMode::open) records_.schedule_s = std::max(records_.schedule_s, r.start_s);
    records_.measured.push_back(std::move(r));
  }

  net::awaitable<void> scrape_at_measure_start(std::string path) {
    net::steady_timer timer(io_);
    timer.expires_at(start_ + to_duration(plan_.warmup_s));
    boost::system::error_code ec;
    co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
    records_.metrics_at_measure_start = co_await fetch_text_async(io_.get_executor(), endpoint_, "GET", path, 10.0);
  }

  net::awaitable<void> closed_client() {
    HttpConnection conn(io_.get_executor(), endpoint_);
    while (std::optional<Slot> slot = claim(Clock::now())) co_await run_one(conn, *slot);
  }

  net::awaitable<void> open_arrivals() {
    ArrivalSchedule schedule(plan_.arrival, plan_.rate_per_s, plan_.seed);
    net::steady_timer timer(io_);
    while (true) {
      const Clock::time_point due = start_ + to_duration(schedule.next_s());
      std::optional<Slot> slot = claim(due);
      if (!slot) break;
      timer.expires_at(due);
      boost::system::error_code ec;
      co_await timer.async_wait(net::redirect_error(net::use_awaitable, ec));
      dispatch(*slot);
    }
  }

  // Sends on an idle connection, a new one while under max_connections, else queues.
  void dispatch(const Slot& slot) {
    std::unique_ptr<HttpConnection> conn;
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    } else if (num_connections_ < plan_.max_connections) {
      conn = std::make_unique<HttpConnection>(io_.get_executor(), endpoint_);
      ++num_connections_;
    } else {
      backlog_.push_back(slot);
      return;
    }
    net::co_spawn(io_, serve(std::move(conn), slot), net::detached);
  }

  net::awaitable<void> serve(std::unique_ptr<HttpConnection> conn, Slot slot) {
    co_await run_one(*conn, slot);
    while (!backlog_.empty()) {
      const Slot next = backlog_.front();
      backlog_.pop_front();
      co_await run_one(*conn, next);
    }
    idle_.push_back(std::move(conn));
  }

  net::io_context& io_;
  const ResolvedEndpoint& endpoint_;  // not owned
  const Workload& workload_;          // not owned
  const LoadPlan plan_;
  const Clock::time_point start_;
  uint64_t next_index_ = 0;
  int64_t num_measured_started_ = 0;
  LoadRecords records_;
  // Open loop only.
  std::vector<std::unique_ptr<HttpConnection>> idle_;
  int64_t num_connections_ = 0;
  std::deque<Slot> backlog_;
};

}  // namespace

RequestPhase request_phase(const LoadPlan& plan, double t_s, int64_t num_measured_started) {
  if (t_s < plan.warmup_s) return RequestPhase::warmup;
  if (plan.duration_s > 0) return t_s < plan.warmup_s + plan.duration_s ? RequestPhase::measured : RequestPhase::stop;
  return num_measured_started < plan.num_requests ? RequestPhase::measured : RequestPhase::stop;
}

Result<LoadRecords> run_load(const ResolvedEndpoint& endpoint, const Workload& workload, const LoadPlan& plan,
                             const std::string& metrics_path) {
  if (plan.mode == LoadMode::closed && plan.concurrency < 1) return invalid_argument("the concurrency must be at least 1");
  if (plan.mode == LoadMode::open && !(plan.rate_per_s > 0)) return invalid_argument("the rate must be positive");
  if (plan.duration_s <= 0 && plan.num_requests <= 0) return invalid_argument("give a duration or a number of requests");
  if (!(plan.timeout_s > 0)) return invalid_argument("the timeout must be positive");
  net::io_context io(1);
  Runner runner(io, endpoint, workload, plan);
  runner.start(metrics_path);
  io.run();
  return runner.finish();
}

}  // namespace prism::tools::loadgen
