// api/routes/generate_call.h: one client call of a generate route, from its submitted
// requests to its answer. A call has one request per prompt (chat: one; completions: one per
// prompt of a batched `prompt`), each with n choices; choice k of prompt i is the client's
// choice i * n + k. Without stream the call answers once every request completed; with
// stream it writes Server-Sent Events as the engine's GenerateChunk partials arrive:
//   chat: a {"role": "assistant", "content": ""} delta per choice first (completions with
//   echo: the prompt's text), content deltas, a finish chunk per choice (empty delta and
//   finish_reason), the usage chunk when asked, then [DONE].
// A failure after the stream started is an {"error": {...}} event, then [DONE]. The client
// going away (disconnect, a failed write) cancels every request of the call.
// Thread-safe: partials and completions arrive on replica threads, cancellation on I/O threads.
// Must not: block (it runs on I/O and engine threads), or see tensors.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "api/errors.h"
#include "api/http_types.h"
#include "api/routes/generate_response.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "serving/deployment.h"
#include "serving/request.h"

namespace prism::api {

// The engine's input for one prompt: the stop token ids checked against the vocabulary
// (param "stop_token_ids"), max_tokens resolved against the context (400 with the numbers,
// code "context_length_exceeded", param `prompt_param`: "messages" or "prompt"), the sampling
// fields over the model's defaults. On error, `error` is the client's.
Result<std::unique_ptr<frontends::GenerateInput>> build_generate_input(
    const frontends::GenerateFrontend& frontend, std::vector<int32_t> prompt, const GenerateFields& fields,
    std::string_view prompt_param, ApiError& error);

// The header every body of a call carries: id "<prefix><request id>", created now, the
// deployment's precision as system_fingerprint ("prism-bf16").
ReplyHeader make_reply_header(GenerateApi api, const std::string& model, const serving::Deployment& deployment,
                              const std::string& request_id, bool include_usage);

struct GenerateCallSpec {
  ReplyHeader header;
  int n = 1;  // choices per prompt
  bool stream = false;
  bool logprobs = false;               // the requests asked for logprobs
  std::vector<std::string> echo;       // per prompt: text each of its choices starts with ("" = none)
  std::vector<int64_t> prompt_tokens;  // per prompt, for usage when a request fails to report it
  int64_t image_tokens = 0;            // over every prompt: visual tokens of images (chat usage)
  int64_t video_tokens = 0;            // ... of videos
  TokenTextFn token_text;
  serving::Lane lane = serving::Lane::online;
  std::string request_id;  // the HTTP request's; sub-requests add "-<prompt>"
};

class GenerateCall : public std::enable_shared_from_this<GenerateCall> {
 public:
  // Submits one request per input (in prompt order) to `deployment` and answers through
  // `responder`; a refused submit answers the client (429/503) and cancels what was queued.
  static void run(serving::Deployment& deployment, Responder responder, GenerateCallSpec spec,
                  std::vector<std::unique_ptr<frontends::GenerateInput>> inputs);

  GenerateCall(Responder responder, GenerateCallSpec spec);

 private:
  struct ChoiceState {
    size_t text_bytes = 0;    // text streamed so far
    size_t logprobs = 0;      // logprobs entries streamed so far
    int64_t text_offset = 0;  // completions' legacy text_offset of the next token
    bool finished = false;    // its finish chunk went out
  };

  void on_partial(size_t prompt, serving::PayloadPtr chunk);
  void on_complete(size_t prompt, Result<serving::PayloadPtr> result);
  void cancel_all();

  // ---- under mu_ ----
  void start_stream_locked();
  void fail_locked(const ApiError& error);
  void write_locked(const std::string& event);
  void stream_delta_locked(size_t prompt, const frontends::ChoiceDelta& delta);
  void stream_rest_locked(size_t prompt, const frontends::ChoiceDelta& choice);
  void finish_locked();

  Responder responder_;
  const GenerateCallSpec spec_;

  std::mutex requests_mu_;  // guards requests_ (never held while calling into the HTTP layer)
  std::vector<std::weak_ptr<serving::Request>> requests_;

  std::mutex mu_;         // guards everything below
  bool done_ = false;     // answered, failed or abandoned: later events are dropped
  bool started_ = false;  // stream: headers and first chunks written
  StreamWriter writer_;
  std::vector<ChoiceState> choices_;          // [prompts * n]
  std::vector<serving::PayloadPtr> outputs_;  // per prompt, once complete: a GenerateOutput
  size_t num_pending_ = 0;
};

}  // namespace prism::api
