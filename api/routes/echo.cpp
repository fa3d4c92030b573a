// api/routes/echo.cpp: the echo routes. The payload is the input's JSON text; the engine hands
// it back and the response parses it again, so the round trip costs what a real route's JSON
// work costs.
#include "api/routes/echo.h"

#include <memory>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/errors.h"
#include "api/json_fields.h"
#include "api/routes/deployment_call.h"
#include "api/sse.h"
#include "serving/echo_engine.h"

namespace prism::api {

namespace {

constexpr std::string_view kTask = "echo";

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// The engine's payload for an input. An "error:..." string goes raw so the engine fails it;
// any other input goes as JSON text, which never starts with "error:".
std::string payload_text(const nlohmann::json& input) {
  if (input.is_string() && input.get_ref<const std::string&>().starts_with("error:"))
    return input.get<std::string>();
  return dump(input);
}

// Rough token count for the batcher: about four bytes a token.
int64_t cost_of(const std::string& text) { return 1 + static_cast<int64_t>(text.size() / 4); }

// The engine's output as JSON again (it is the text we sent, so it parses).
nlohmann::json output_of(serving::PayloadPtr& payload) {
  auto* echo = dynamic_cast<serving::EchoPayload*>(payload.get());
  if (echo == nullptr) return nullptr;
  return nlohmann::json::parse(echo->text, nullptr, /*allow_exceptions=*/false);
}

void stream_output(Responder& responder, const std::string& model, const nlohmann::json& output) {
  StreamWriter w = start_sse(responder);
  auto event = [&](size_t index, const nlohmann::json& value) {
    return w.write(sse_event(dump({{"id", responder.request_id()},
                                   {"object", "prism.echo.chunk"},
                                   {"model", model},
                                   {"index", index},
                                   {"output", value}})));
  };
  if (output.is_array()) {
    for (size_t i = 0; i < output.size(); ++i)
      if (!event(i, output[i])) return;  // client gone: stop producing
  } else if (!event(0, output)) {
    return;
  }
  w.write(std::string(sse_done()));
  w.close();
}

void post_echo(serving::DeploymentSet& deployments, const Request& request, Responder responder) {
  JsonFields f(request.body);
  std::string model = f.required_string("model");
  if (f.ok() && !f.json().contains("input")) f.fail("input", "is required (any JSON value)");
  const serving::Lane lane = read_priority(f);
  const bool stream = f.optional_bool("stream", false);
  if (!f.ok()) return (void)responder.send(error_response(f.error()));

  ApiError error;
  Result<serving::Deployment*> d = find_deployment(deployments, model, kTask, error);
  if (!d.has_value()) return (void)responder.send(error_response(error));

  std::string text = payload_text(f.json()["input"]);
  const int64_t cost = cost_of(text);
  submit_or_refuse(
      *d.value(), std::make_unique<serving::EchoPayload>(std::move(text)),
      [responder, model, stream](Result<serving::PayloadPtr> result) mutable {
        if (!result.has_value()) {
          if (result.status().code() != StatusCode::cancelled) responder.send(error_response(completion_error(result.status())));
          return;
        }
        nlohmann::json output = output_of(result.value());
        if (stream) return stream_output(responder, model, output);
        responder.send(Response::json(200, dump({{"id", responder.request_id()},
                                                  {"object", "prism.echo"},
                                                  {"model", model},
                                                  {"output", std::move(output)}})));
      },
      cost, lane, responder);
}

// Requests of one WebSocket connection still running, cancelled when it closes.
// Thread-safe: messages arrive on the I/O strand, completions on replica threads.
class WsInFlight {
 public:
  void add(const serving::RequestPtr& r) {
    std::lock_guard lock(mu_);
    std::erase_if(requests_, [](const std::weak_ptr<serving::Request>& w) {
      auto p = w.lock();
      return !p || p->completed();
    });
    requests_.push_back(r);
  }
  void cancel_all() {
    std::lock_guard lock(mu_);
    for (auto& w : requests_)
      if (auto p = w.lock()) p->cancel();
    requests_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::weak_ptr<serving::Request>> requests_;
};

void ws_message(serving::Deployment& d, WebSocketConn conn, const std::shared_ptr<WsInFlight>& in_flight,
                std::string_view message, bool binary) {
  std::string text(message);
  if (!binary) {
    nlohmann::json input = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (input.is_discarded()) {
      conn.send_text(error_json(invalid_json("a WebSocket text message must be one JSON value")));
      return;
    }
    text = payload_text(input);
  }
  const std::string model = d.name();
  const int64_t cost = cost_of(text);
  serving::RequestPtr r = serving::make_request(
      std::make_unique<serving::EchoPayload>(std::move(text)),
      [conn, model, binary](Result<serving::PayloadPtr> result) mutable {
        if (!result.has_value()) {
          if (result.status().code() != StatusCode::cancelled) conn.send_text(error_json(completion_error(result.status())));
          return;
        }
        if (binary) {
          auto* echo = dynamic_cast<serving::EchoPayload*>(result.value().get());
          conn.send_binary(echo != nullptr ? std::move(echo->text) : std::string());
          return;
        }
        conn.send_text(dump({{"object", "prism.echo"}, {"model", model}, {"output", output_of(result.value())}}));
      });
  r->cost_tokens = cost;
  r->request_id = conn.request_id();
  if (auto refused = submit_to(d, r)) {
    conn.send_text(error_json(*refused));
    return;
  }
  in_flight->add(r);
}

WebSocketCallbacks ws_open(serving::DeploymentSet& deployments, const Request& request, WebSocketConn conn) {
  const std::string model(request.query_param("model"));
  ApiError error;
  Result<serving::Deployment*> d =
      model.empty() ? Result<serving::Deployment*>(invalid_argument("no model"))
                    : find_deployment(deployments, model, kTask, error);
  if (!d.has_value()) {
    if (model.empty()) error = invalid_field("model", "is required: connect to /v1/prism/echo/ws?model=NAME");
    conn.send_text(error_json(error));
    conn.close(1008, error.status == 404 ? "model not found" : "invalid request");  // 1008: policy violation
    return {};
  }
  auto in_flight = std::make_shared<WsInFlight>();
  WebSocketCallbacks callbacks;
  serving::Deployment* deployment = d.value();
  callbacks.on_message = [deployment, conn, in_flight](std::string_view message, bool binary) {
    ws_message(*deployment, conn, in_flight, message, binary);
  };
  callbacks.on_close = [in_flight] { in_flight->cancel_all(); };
  return callbacks;
}

}  // namespace

void add_echo_routes(Router& router, serving::DeploymentSet& deployments) {
  serving::DeploymentSet* set = &deployments;
  router.add("POST", "/v1/prism/echo",
             [set](const Request& request, Responder responder) { post_echo(*set, request, std::move(responder)); });
  router.add_websocket("/v1/prism/echo/ws", [set](const Request& request, WebSocketConn conn) {
    return ws_open(*set, request, std::move(conn));
  });
}

}  // namespace prism::api
