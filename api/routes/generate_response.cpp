// api/routes/generate_response.cpp: response and chunk bodies. Built as ordered_json so keys
// come in OpenAI's order (id, object, created, model, ...), which clients do not need but
// people reading streams do.
#include "api/routes/generate_response.h"

#include <array>
#include <charconv>
#include <cstdlib>

namespace prism::api {

namespace {

using ojson = nlohmann::ordered_json;

// NOTE: a float's shortest decimal, as a double: JSON then shows -0.6931472, not the
// -0.6931471824645996 of the float widened to a double.
double shortest(float x) {
  std::array<char, 32> buf;
  auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), x);
  if (ec != std::errc()) return x;
  *end = '\0';
  return std::strtod(buf.data(), nullptr);
}

ojson token_bytes(const std::string& text) {
  ojson bytes = ojson::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

ojson chat_token_json(const frontends::TokenLogprob& t, const TokenTextFn& token_text) {
  const std::string text = token_text(t.token);
  ojson j = ojson::object();
  j["token"] = text;
  j["logprob"] = shortest(t.logprob);
  j["bytes"] = token_bytes(text);
  return j;
}

ojson usage_json(GenerateApi api, const Usage& usage) {
  ojson u = ojson::object();
  u["prompt_tokens"] = usage.prompt_tokens;
  u["completion_tokens"] = usage.completion_tokens;
  u["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  ojson details = ojson{{"cached_tokens", usage.cached_tokens}};
  if (api == GenerateApi::chat) {
    if (usage.image_tokens > 0) details["image_tokens"] = usage.image_tokens;
    if (usage.video_tokens > 0) details["video_tokens"] = usage.video_tokens;
  }
  u["prompt_tokens_details"] = std::move(details);
  return u;
}

const char* object_name(GenerateApi api, bool chunk) {
  if (api == GenerateApi::completions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

ojson envelope(const ReplyHeader& h, bool chunk) {
  ojson j = ojson::object();
  j["id"] = h.id;
  j["object"] = object_name(h.api, chunk);
  j["created"] = h.created;
  j["model"] = h.model;
  j["system_fingerprint"] = h.system_fingerprint;
  return j;
}

ojson finish_json(std::optional<frontends::FinishReason> finish) {
  if (!finish) return nullptr;
  return std::string(frontends::finish_reason_name(*finish));
}

}  // namespace

std::string dump_json(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson chat_logprobs_json(std::span<const frontends::TokenLogprobs> logprobs, const TokenTextFn& token_text) {
  ojson content = ojson::array();
  for (const frontends::TokenLogprobs& lp : logprobs) {
    ojson entry = chat_token_json(lp.chosen, token_text);
    ojson top = ojson::array();
    for (const frontends::TokenLogprob& t : lp.top) top.push_back(chat_token_json(t, token_text));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return ojson{{"content", std::move(content)}};
}

ojson legacy_logprobs_json(std::span<const frontends::TokenLogprobs> logprobs, const TokenTextFn& token_text,
                           int64_t& text_offset) {
  ojson tokens = ojson::array(), token_logprobs = ojson::array(), top_logprobs = ojson::array(),
        offsets = ojson::array();
  for (const frontends::TokenLogprobs& lp : logprobs) {
    const std::string text = token_text(lp.chosen.token);
    tokens.push_back(text);
    token_logprobs.push_back(shortest(lp.chosen.logprob));
    // NOTE: a map from text to logprob: two tokens with one text keep the likelier (listed first).
    ojson top = ojson::object();
    for (const frontends::TokenLogprob& t : lp.top) {
      std::string key = token_text(t.token);
      if (!top.contains(key)) top[key] = shortest(t.logprob);
    }
    top_logprobs.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(text.size());
  }
  ojson j = ojson::object();
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(top_logprobs);
  j["text_offset"] = std::move(offsets);
  return j;
}

std::string chunk_json(const ReplyHeader& header, const StreamPiece& piece, const TokenTextFn& token_text,
                       int64_t& text_offset) {
  const bool chat = header.api == GenerateApi::chat;
  ojson choice = ojson::object();
  choice["index"] = piece.index;
  if (chat) {
    ojson delta = ojson::object();
    if (piece.role) {
      delta["role"] = "assistant";
      delta["content"] = "";
    } else if (!piece.finish) {
      delta["content"] = piece.text;
    }
    choice["delta"] = std::move(delta);
    choice["logprobs"] = piece.logprobs.empty() ? ojson(nullptr) : chat_logprobs_json(piece.logprobs, token_text);
  } else {
    choice["text"] = piece.text;
    choice["logprobs"] =
        piece.logprobs.empty() ? ojson(nullptr) : legacy_logprobs_json(piece.logprobs, token_text, text_offset);
  }
  choice["finish_reason"] = finish_json(piece.finish);
  ojson j = envelope(header, /*chunk=*/true);
  j["choices"] = ojson::array({std::move(choice)});
  if (header.include_usage) j["usage"] = nullptr;
  return dump_json(j);
}

std::string usage_chunk_json(const ReplyHeader& header, const Usage& usage) {
  ojson j = envelope(header, /*chunk=*/true);
  j["choices"] = ojson::array();
  j["usage"] = usage_json(header.api, usage);
  return dump_json(j);
}

std::string response_json(const ReplyHeader& header, std::span<const FinalChoice> choices, const Usage& usage,
                          const TokenTextFn& token_text) {
  const bool chat = header.api == GenerateApi::chat;
  ojson list = ojson::array();
  for (const FinalChoice& c : choices) {
    ojson choice = ojson::object();
    choice["index"] = c.index;
    if (chat) {
      choice["message"] = ojson{{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = c.has_logprobs ? chat_logprobs_json(c.logprobs, token_text) : ojson(nullptr);
    } else {
      choice["text"] = c.text;
      int64_t offset = c.text_offset;
      choice["logprobs"] = c.has_logprobs ? legacy_logprobs_json(c.logprobs, token_text, offset) : ojson(nullptr);
    }
    choice["finish_reason"] = finish_json(c.finish);
    list.push_back(std::move(choice));
  }
  ojson j = envelope(header, /*chunk=*/false);
  j["choices"] = std::move(list);
  j["usage"] = usage_json(header.api, usage);
  return dump_json(j);
}

}  // namespace prism::api
