// api/routes/chat_media.cpp: reading a conversation's content parts and turning it into a
// generate deployment's prompt, images and videos included.
#include "api/routes/chat_media.h"

#include <utility>

#include "api/json_fields.h"

namespace prism::api {

namespace {

using ojson = nlohmann::ordered_json;

Status fail(ApiError& error, std::string_view param, std::string message) {
  error = from_status(invalid_argument(message), std::string(param));
  return invalid_argument(std::move(message));
}

// json_type_name for ordered_json: an empty value of the same type names it.
std::string type_of(const ojson& v) { return json_type_name(nlohmann::json(v.type())); }

std::string_view kind_name(frontends::MediaItem::Kind kind) {
  return kind == frontends::MediaItem::Kind::image ? "image" : "video";
}

// An image_url / video_url part's URL: {"url": ..., "detail"?} or the URL itself.
Result<MediaPart> read_media_part(const ojson& part, const std::string& type, const std::string& name) {
  MediaPart media;
  media.kind = type == "image_url" ? frontends::MediaItem::Kind::image : frontends::MediaItem::Kind::video;
  media.name = name;
  const auto value = part.find(type);
  const std::string field = name + "." + type;
  if (value == part.end() || value->is_null())
    return invalid_argument(field + " is required: an object {\"url\": ...} or a URL string.");
  if (value->is_string()) {
    media.url = value->get<std::string>();
  } else if (value->is_object()) {
    const auto url = value->find("url");
    if (url == value->end() || !url->is_string()) return invalid_argument(field + ".url is required: a string.");
    media.url = url->get<std::string>();
    if (const auto detail = value->find("detail"); detail != value->end() && !detail->is_null()) {
      if (media.kind != frontends::MediaItem::Kind::image || !detail->is_string() ||
          (*detail != "auto" && *detail != "low" && *detail != "high"))
        return invalid_argument(field + ".detail " + detail->dump() + " is not one of 'auto', 'low', 'high'.");
      media.detail = detail->get<std::string>();
    }
  } else {
    return invalid_argument(field + " is " + type_of(*value) + ": expected an object {\"url\": ...} or a URL string.");
  }
  if (media.url.empty()) return invalid_argument(field + ".url is an empty string.");
  return media;
}

// A message's content as the template gets it: a string (media null; text parts joined with
// "\n"), or an array of text and image parts.
Result<ojson> read_content(const ojson& content, const std::string& name, std::vector<MediaPart>* media) {
  if (content.is_string()) {
    if (media == nullptr) return content;
    return ojson::array({ojson{{"type", "text"}, {"text", content}}});
  }
  if (!content.is_array())
    return invalid_argument(name + " is " + type_of(content) + ": expected a string or an array of content parts.");
  std::string text;
  ojson parts = ojson::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string part_name = name + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return invalid_argument(part_name + " is " + type_of(part) + ", not a content part object.");
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return invalid_argument(part_name + ".type is required: a string.");
    const std::string t = type->get<std::string>();
    if (t == "text") {
      auto part_text = part.find("text");
      if (part_text == part.end() || !part_text->is_string())
        return invalid_argument(part_name + ".text is required: a string.");
      if (i > 0) text += '\n';
      text += part_text->get<std::string>();
      parts.push_back(ojson{{"type", "text"}, {"text", *part_text}});
      continue;
    }
    if (media == nullptr)
      return invalid_argument(part_name + " has type '" + t +
                              "': this model takes only text parts ({\"type\": \"text\", \"text\": ...}).");
    if (t != "image_url" && t != "video_url")
      return invalid_argument(part_name + " has type '" + t +
                              "': content parts are of type 'text', 'image_url' or 'video_url'.");
    PRISM_ASSIGN_OR_RETURN(MediaPart m, read_media_part(part, t, part_name));
    media->push_back(std::move(m));
    // NOTE: the templates of the families Prism serves know {"type": "image"}; a video is a
    // sequence of frames behind one placeholder too, expanded by the processor.
    parts.push_back(ojson{{"type", "image"}});
  }
  if (media == nullptr) return ojson(std::move(text));
  return parts;
}

Result<ojson> read_message(const ojson& m, size_t index, std::vector<MediaPart>* media) {
  const std::string name = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) return invalid_argument(name + " is " + type_of(m) + ", not a message object.");
  auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return invalid_argument(name + ".role is required: a string.");
  const std::string r = role->get<std::string>();
  if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
    return invalid_argument(name + ".role '" + r +
                            "' is not one of 'system', 'developer', 'user', 'assistant', 'tool'.");
  ojson out = m;  // other keys (name, tool_calls, tool_call_id) go to the template as sent
  // NOTE: OpenAI's "developer" is the system prompt of newer models; templates know "system".
  if (r == "developer") out["role"] = "system";
  auto content = m.find("content");
  if (content == m.end() || content->is_null()) {
    if (r != "assistant") return invalid_argument(name + ".content is required for role '" + r + "'.");
    // An assistant turn of tool calls only.
    PRISM_ASSIGN_OR_RETURN(out["content"], read_content(ojson(""), name + ".content", media));
    return out;
  }
  PRISM_ASSIGN_OR_RETURN(out["content"], read_content(*content, name + ".content", media));
  return out;
}

// A Status of the media layer or the processor as the client's error for one part.
ApiError part_error(const MediaPart& part, const Status& s) {
  const std::string message = part.name + " " + s.message();
  switch (s.code()) {
    case StatusCode::internal:
    case StatusCode::data_loss:
      return from_status(s);  // a bug: the caller logs it; the client gets the generic 500
    default:
      // NOTE: a refused path or host, a missing file and a failed download are the request's
      // fault too: 400 naming the part, never a 403/404 that would read as the route's.
      return from_status(invalid_argument(message), part.name);
  }
}

}  // namespace

Result<text::ChatRequest> read_conversation(const ojson& body, ApiError& error, std::vector<MediaPart>* media) {
  text::ChatRequest chat;
  chat.add_generation_prompt = true;
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) {
    error = invalid_field("messages", "this field is required.");
    error.message = "Missing required parameter: 'messages'.";
    error.code = "missing_required_parameter";
    return invalid_argument(error.message);
  }
  if (!messages->is_array())
    return fail(error, "messages", "messages is " + type_of(*messages) + ": expected an array of messages.");
  if (messages->empty())
    return fail(error, "messages", "messages is an empty array: at least one message is required.");
  for (size_t i = 0; i < messages->size(); ++i) {
    Result<ojson> m = read_message((*messages)[i], i, media);
    if (!m.has_value()) return fail(error, "messages", m.status().message());
    chat.messages.push_back(std::move(m).value());
  }

  if (auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
    if (!tools->is_array())
      return fail(error, "tools", "tools is " + type_of(*tools) + ": expected an array of tools.");
    for (size_t i = 0; i < tools->size(); ++i)
      if (!(*tools)[i].is_object())
        return fail(error, "tools",
                    "tools[" + std::to_string(i) + "] is " + type_of((*tools)[i]) + ", not a tool object.");
    if (!tools->empty()) chat.tools = *tools;
  }
  if (auto choice = body.find("tool_choice"); choice != body.end() && !choice->is_null()) {
    if (*choice == "none") {
      chat.tools.reset();
    } else if (*choice != "auto") {
      return fail(error, "tool_choice",
                  "tool_choice " + choice->dump() +
                      " is not supported: Prism passes tools to the chat template but does not parse or force tool "
                      "calls; use \"auto\" or \"none\".");
    }
  }
  if (auto format = body.find("response_format"); format != body.end() && !format->is_null()) {
    const bool text = format->is_object() && format->contains("type") && (*format)["type"] == "text";
    if (!text)
      return fail(error, "response_format",
                  "response_format " + format->dump() + " is not supported: only {\"type\": \"text\"} is.");
  }
  if (auto kwargs = body.find("chat_template_kwargs"); kwargs != body.end() && !kwargs->is_null()) {
    if (!kwargs->is_object())
      return fail(error, "chat_template_kwargs",
                  "chat_template_kwargs is " + type_of(*kwargs) + ": expected an object.");
    chat.extra = *kwargs;
  }
  return chat;
}

Result<frontends::VisualBudget> read_visual_budget(const frontends::VisionProcessor& vision, const ojson& body, ApiError& error) {
  const auto field = body.find("prism");
  const nlohmann::json prism = field == body.end() ? nlohmann::json() : nlohmann::json(*field);
  Result<frontends::VisualBudget> budget = vision.budget(prism);
  if (!budget.has_value()) {
    // The message names the option first: "prism.spatial_pool must ...".
    const std::string m = budget.status().message();
    std::string param = "prism";
    if (m.starts_with("prism.")) param = m.substr(0, m.find(' '));
    error = from_status(budget.status(), param);
  }
  return budget;
}

Result<std::vector<frontends::PreparedMedia>> prepare_media_parts(const frontends::VisionProcessor& vision,
                                                            std::span<const MediaPart> parts,
                                                            const frontends::VisualBudget& budget, ApiError& error) {
  std::vector<frontends::PreparedMedia> prepared;
  prepared.reserve(parts.size());
  for (const MediaPart& part : parts) {
    Result<frontends::PreparedMedia> item = Status();
    if (part.kind == frontends::MediaItem::Kind::image) {
      frontends::VisualBudget b = budget;
      if (part.detail == "low") b.image.max_tiles = 0;  // OpenAI's low detail: one low-resolution view
      item = vision.prepare_image_url(part.url, b);
    } else {
      item = vision.prepare_video_url(part.url, budget);
    }
    if (!item.has_value()) {
      error = part_error(part, item.status());
      return item.status();
    }
    prepared.push_back(std::move(item).value());
  }
  return prepared;
}

Result<ChatPrompt> build_chat_prompt(const frontends::GenerateFrontend& frontend, std::string_view model, const ojson& body,
                                     const text::ChatRequest& conversation, std::span<const MediaPart> media,
                                     ApiError& error) {
  auto prompt_error = [&](const Status& s) {
    if (s.code() == StatusCode::failed_precondition)  // no chat template
      error = invalid_field("model", "the model '" + std::string(model) +
                                         "' has no chat template: send its prompts to /v1/completions.");
    else
      error = from_status(s, "messages");
    return s;
  };
  ChatPrompt out;
  const frontends::VisionProcessor* vision = frontend.vision();
  if (vision == nullptr) {
    if (!media.empty()) {
      const MediaPart& part = media.front();
      const std::string type = part.kind == frontends::MediaItem::Kind::image ? "image_url" : "video_url";
      return fail(error, "messages",
                  part.name + " has type '" + type + "': the model '" + std::string(model) + "' does not accept " +
                      std::string(kind_name(part.kind)) + " input.");
    }
    // A text model's template gets string contents, as it always did.
    PRISM_ASSIGN_OR_RETURN(text::ChatRequest chat, read_conversation(body, error, nullptr));
    Result<std::vector<int32_t>> ids = frontend.chat_prompt(chat);
    if (!ids.has_value()) return prompt_error(ids.status());
    out.ids = std::move(ids).value();
    return out;
  }

  PRISM_ASSIGN_OR_RETURN(const frontends::VisualBudget budget, read_visual_budget(*vision, body, error));
  PRISM_ASSIGN_OR_RETURN(std::vector<frontends::PreparedMedia> prepared, prepare_media_parts(*vision, media, budget, error));
  Result<std::vector<int32_t>> ids = frontend.chat_prompt(conversation, prepared);
  if (!ids.has_value()) return prompt_error(ids.status());
  out.ids = std::move(ids).value();
  for (frontends::PreparedMedia& p : prepared) {
    (p.item.kind == frontends::MediaItem::Kind::image ? out.image_tokens : out.video_tokens) += p.item.num_rows;
    out.frames += p.frames;
    out.media.push_back(std::move(p.item));
  }
  return out;
}

}  // namespace prism::api
