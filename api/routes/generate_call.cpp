// api/routes/generate_call.cpp: submitting a generate call's requests and answering it.
// NOTE: every write to the client happens under mu_, so a call's events leave in the order
// they were produced even when its requests run on different replicas; requests_mu_ is a
// separate lock so cancelling (from I/O threads) never waits on a write.
#include "api/routes/generate_call.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "api/routes/deployment_call.h"
#include "api/sse.h"
#include "base/log.h"

namespace prism::api {


Result<std::unique_ptr<frontends::GenerateInput>> build_generate_input(const frontends::GenerateFrontend& frontend,
                                                                 std::vector<int32_t> prompt,
                                                                 const GenerateFields& fields,
                                                                 std::string_view prompt_param, ApiError& error) {
  Result<std::vector<int32_t>> stop_ids = std::vector<int32_t>();
  if (!fields.stop_token_ids.empty()) stop_ids = frontend.check_ids(fields.stop_token_ids);
  if (!stop_ids.has_value()) {
    error = from_status(stop_ids.status(), "stop_token_ids");
    error.message = "stop_token_ids: " + error.message;
    return stop_ids.status();
  }
  Result<int> max_tokens = frontend.resolve_max_tokens(static_cast<int64_t>(prompt.size()), fields.max_tokens);
  if (!max_tokens.has_value()) {
    error = from_status(max_tokens.status(), std::string(prompt_param));
    if (error.status == 400) error.code = "context_length_exceeded";
    return max_tokens.status();
  }
  Result<frontends::SamplingParams> sampling =
      to_sampling_params(fields, frontend.default_sampling(), max_tokens.value(), std::move(stop_ids).value());
  if (!sampling.has_value()) {
    error = from_status(sampling.status(), "min_tokens");
    return sampling.status();
  }
  auto input = std::make_unique<frontends::GenerateInput>();
  input->prompt = std::move(prompt);
  input->sampling = std::move(sampling).value();
  return input;
}

ReplyHeader make_reply_header(GenerateApi api, const std::string& model, const serving::Deployment& deployment,
                              const std::string& request_id, bool include_usage) {
  ReplyHeader h;
  h.api = api;
  h.id = (api == GenerateApi::chat ? "chatcmpl-" : "cmpl-") + request_id;
  h.model = model;
  h.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  h.system_fingerprint = "prism-" + deployment.config().precision;
  h.include_usage = include_usage;
  return h;
}

void GenerateCall::run(serving::Deployment& deployment, Responder responder, GenerateCallSpec spec,
                       std::vector<std::unique_ptr<frontends::GenerateInput>> inputs) {
  auto call = std::make_shared<GenerateCall>(responder, std::move(spec));
  call->num_pending_ = inputs.size();
  call->outputs_.resize(inputs.size());
  call->choices_.resize(inputs.size() * static_cast<size_t>(call->spec_.n));
  for (size_t p = 0; p < inputs.size(); ++p)
    for (int k = 0; k < call->spec_.n; ++k)
      call->choices_[p * call->spec_.n + k].text_offset = static_cast<int64_t>(call->spec_.echo[p].size());

  std::vector<serving::RequestPtr> requests;
  for (size_t p = 0; p < inputs.size(); ++p) {
    const int64_t cost = std::max<int64_t>(1, static_cast<int64_t>(inputs[p]->prompt.size()));
    serving::RequestPtr r = serving::make_request(std::move(inputs[p]), [call, p](Result<serving::PayloadPtr> result) {
      call->on_complete(p, std::move(result));
    });
    if (call->spec_.stream)
      r->on_partial = [call, p](serving::PayloadPtr chunk) { call->on_partial(p, std::move(chunk)); };
    r->cost_tokens = cost;
    r->lane = call->spec_.lane;
    r->request_id = inputs.size() == 1 ? call->spec_.request_id : call->spec_.request_id + "-" + std::to_string(p);
    requests.push_back(r);
  }
  {
    std::lock_guard lock(call->requests_mu_);
    for (const serving::RequestPtr& r : requests) call->requests_.push_back(r);
  }
  for (const serving::RequestPtr& r : requests) {
    if (std::optional<ApiError> refused = submit_to(deployment, r)) {
      {
        std::lock_guard lock(call->mu_);
        if (!call->done_) call->fail_locked(*refused);
      }
      call->cancel_all();  // those already queued complete as cancelled, which the call ignores
      return;
    }
  }
  // weak: the responder holds this callback, and the call holds the responder.
  std::weak_ptr<GenerateCall> weak = call;
  responder.on_cancel([weak] {
    if (auto c = weak.lock()) c->cancel_all();
  });
  if (call->spec_.stream) {
    std::lock_guard lock(call->mu_);
    if (!call->done_ && !call->started_) call->start_stream_locked();
  }
}

GenerateCall::GenerateCall(Responder responder, GenerateCallSpec spec)
    : responder_(std::move(responder)), spec_(std::move(spec)) {}

void GenerateCall::cancel_all() {
  std::lock_guard lock(requests_mu_);
  for (const std::weak_ptr<serving::Request>& w : requests_)
    if (auto r = w.lock()) r->cancel();
}

void GenerateCall::on_partial(size_t prompt, serving::PayloadPtr payload) {
  const auto* chunk = dynamic_cast<const frontends::GenerateChunk*>(payload.get());
  std::lock_guard lock(mu_);
  if (done_ || chunk == nullptr) return;
  if (!started_) start_stream_locked();
  for (const frontends::ChoiceDelta& delta : chunk->deltas) {
    if (done_) return;
    stream_delta_locked(prompt, delta);
  }
}

void GenerateCall::on_complete(size_t prompt, Result<serving::PayloadPtr> result) {
  std::lock_guard lock(mu_);
  if (done_) return;
  if (!result.has_value()) {
    const Status& s = result.status();
    if (s.code() == StatusCode::cancelled) {
      done_ = true;  // the client went away: nobody to answer
    } else {
      if (s.code() == StatusCode::internal)
        PRISM_LOG_ERROR("request {}: generation failed: {}", spec_.request_id, s.message());
      fail_locked(completion_error(s));
    }
    cancel_all();
    return;
  }
  if (dynamic_cast<const frontends::GenerateOutput*>(result.value().get()) == nullptr) {
    PRISM_LOG_ERROR("request {}: the generate engine returned another payload type", spec_.request_id);
    fail_locked(server_error());
    cancel_all();
    return;
  }
  outputs_[prompt] = std::move(result).value();
  if (spec_.stream) {
    if (!started_) start_stream_locked();
    const auto& output = static_cast<const frontends::GenerateOutput&>(*outputs_[prompt]);
    for (const frontends::ChoiceDelta& choice : output.choices) {
      if (done_) return;
      stream_rest_locked(prompt, choice);
    }
  }
  if (--num_pending_ == 0 && !done_) finish_locked();
}

void GenerateCall::start_stream_locked() {
  started_ = true;
  writer_ = start_sse(responder_);
  const bool chat = spec_.header.api == GenerateApi::chat;
  for (size_t i = 0; i < choices_.size() && !done_; ++i) {
    const std::string& echo = spec_.echo[i / spec_.n];
    if (!chat && echo.empty()) continue;
    StreamPiece piece;
    piece.index = static_cast<int>(i);
    piece.role = chat;
    piece.text = chat ? std::string() : echo;
    int64_t unused_offset = 0;
    write_locked(chunk_json(spec_.header, piece, spec_.token_text, unused_offset));
  }
}

void GenerateCall::write_locked(const std::string& event) {
  if (done_) return;
  if (!writer_.write(sse_event(event))) {
    done_ = true;  // the client went away
    cancel_all();
  }
}

void GenerateCall::stream_delta_locked(size_t prompt, const frontends::ChoiceDelta& delta) {
  if (delta.index < 0 || delta.index >= spec_.n) return;
  const size_t i = prompt * spec_.n + delta.index;
  ChoiceState& st = choices_[i];
  if (st.finished) return;
  if (!delta.text.empty() || !delta.logprobs.empty()) {
    StreamPiece piece;
    piece.index = static_cast<int>(i);
    piece.text = delta.text;
    if (spec_.logprobs) piece.logprobs = delta.logprobs;
    write_locked(chunk_json(spec_.header, piece, spec_.token_text, st.text_offset));
    st.text_bytes += delta.text.size();
    st.logprobs += delta.logprobs.size();
  }
  if (delta.finish) {
    StreamPiece piece;
    piece.index = static_cast<int>(i);
    piece.finish = delta.finish;
    write_locked(chunk_json(spec_.header, piece, spec_.token_text, st.text_offset));
    st.finished = true;
  }
}

void GenerateCall::stream_rest_locked(size_t prompt, const frontends::ChoiceDelta& choice) {
  // NOTE: the partials normally carried everything; this sends what they did not (an engine
  // that streams nothing, or a last delta folded into the completion).
  frontends::ChoiceDelta rest;
  rest.index = choice.index;
  if (choice.index < 0 || choice.index >= spec_.n) return;
  const ChoiceState& st = choices_[prompt * spec_.n + choice.index];
  if (st.finished) return;
  if (choice.text.size() > st.text_bytes) rest.text = choice.text.substr(st.text_bytes);
  if (choice.logprobs.size() > st.logprobs)
    rest.logprobs.assign(choice.logprobs.begin() + static_cast<std::ptrdiff_t>(st.logprobs), choice.logprobs.end());
  rest.finish = choice.finish.value_or(frontends::FinishReason::stop);
  stream_delta_locked(prompt, rest);
}

void GenerateCall::finish_locked() {
  Usage usage;
  usage.image_tokens = spec_.image_tokens;
  usage.video_tokens = spec_.video_tokens;
  for (size_t p = 0; p < outputs_.size(); ++p) {
    const auto& output = static_cast<const frontends::GenerateOutput&>(*outputs_[p]);
    usage.prompt_tokens += output.prompt_tokens > 0 ? output.prompt_tokens : spec_.prompt_tokens[p];
    usage.completion_tokens += output.completion_tokens;
    usage.cached_tokens += output.cached_prompt_tokens;
  }
  if (spec_.stream) {
    if (spec_.header.include_usage) write_locked(usage_chunk_json(spec_.header, usage));
    if (!done_) writer_.write(std::string(sse_done()));
    writer_.close();
    done_ = true;
    return;
  }
  std::vector<FinalChoice> choices;
  choices.reserve(choices_.size());
  for (size_t p = 0; p < outputs_.size(); ++p) {
    const auto& output = static_cast<const frontends::GenerateOutput&>(*outputs_[p]);
    for (const frontends::ChoiceDelta& c : output.choices) {
      FinalChoice f;
      f.index = static_cast<int>(p) * spec_.n + c.index;
      f.text = spec_.echo[p] + c.text;
      f.logprobs = c.logprobs;
      f.has_logprobs = spec_.logprobs;
      f.finish = c.finish.value_or(frontends::FinishReason::stop);
      f.text_offset = static_cast<int64_t>(spec_.echo[p].size());
      choices.push_back(std::move(f));
    }
  }
  std::sort(choices.begin(), choices.end(),
            [](const FinalChoice& a, const FinalChoice& b) { return a.index < b.index; });
  done_ = true;
  responder_.send(Response::json(200, response_json(spec_.header, choices, usage, spec_.token_text)));
}

void GenerateCall::fail_locked(const ApiError& error) {
  if (started_) {
    write_locked(error_json(error));
    done_ = true;
    writer_.write(std::string(sse_done()));
    writer_.close();
    return;
  }
  done_ = true;
  responder_.send(error_response(error));
}

}  // namespace prism::api
