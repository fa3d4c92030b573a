// api/routes/chat_media.h: a chat request's conversation with its content parts (text,
// image_url, video_url), and the prompt a generate deployment gets from it: for a VLM the
// media parts are read, decoded and prepared by its VisionProcessor (on the calling I/O
// thread), the template sees {"type": "image"} parts, and the placeholders are expanded to the
// model's visual tokens; a text-only model refuses media parts.
// Must not: see tensors or run an encoder (the engine does, from the MediaItems).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/errors.h"
#include "base/status.h"
#include "frontends/generate_frontend.h"
#include "frontends/generate_payload.h"
#include "frontends/vision_processor.h"
#include "text/chat_template.h"

namespace prism::api {

// One image_url or video_url part, in prompt order.
struct MediaPart {
  frontends::MediaItem::Kind kind = frontends::MediaItem::Kind::image;
  std::string url;               // data:, file:// or http(s): (media/media_source.h decides what may be read)
  std::string detail = "auto";   // image_url.detail: "auto", "high", or "low" (no tiles: the global view only)
  std::string name;              // "messages[0].content[1]", for errors
};

// The conversation of a request body: `messages` (roles system, developer (rendered as
// system), user, assistant, tool), `tools`, `tool_choice`, `response_format`,
// `chat_template_kwargs`, as chat_completions.h's read_chat_request describes.
// `media` null: content is the template's string, text parts joined with "\n", any other part
// type refused. `media` set: content is always an array of parts for a VLM's template — a
// string becomes one {"type": "text", "text"} part, each image_url ({"url", "detail"?}, or the
// URL as a plain string, as vLLM accepts) and video_url ({"url"} or a string) part becomes
// {"type": "image"} and a MediaPart appended to *media.
// On error: `error` is the client's 400, param the field ("messages", "tools", ...), the
// message naming the element ("messages[2].content[0] ...").
Result<text::ChatRequest> read_conversation(const nlohmann::ordered_json& body, ApiError& error,
                                            std::vector<MediaPart>* media);

// What a deployment's engine gets for one chat: the prompt's token ids (visual tokens
// included, so the context check counts them) and its media in prompt order.
struct ChatPrompt {
  std::vector<int32_t> ids;
  std::vector<frontends::MediaItem> media;
  int64_t image_tokens = 0;  // image-token positions the images fill (usage.prompt_tokens_details)
  int64_t video_tokens = 0;  // ... the videos fill
  int64_t frames = 0;        // video frames sampled
};

// The prompt of `body` (read with media, as `conversation` and `media`) for `frontend`:
//  - text-only model: a media part is a 400 (param "messages", "messages[0].content[1] has type
//    'image_url': the model 'M' does not accept image input."); else the text reading.
//  - VLM: the visual budget is the deployment's with the body's `prism` object applied (400,
//    param "prism.<name>" / "prism"); each part is read and prepared (400 naming the part,
//    param "messages[i].content[j]": a bad data URL, a corrupt image, a file outside the
//    allowed directory, a host not allowed, a video too long ...); the template renders the
//    parts and the placeholders are expanded.
// A model without a chat template: 400, param "model". Other template errors: 400, param
// "messages".
Result<ChatPrompt> build_chat_prompt(const frontends::GenerateFrontend& frontend, std::string_view model,
                                     const nlohmann::ordered_json& body, const text::ChatRequest& conversation,
                                     std::span<const MediaPart> media, ApiError& error);

// The visual budget of a request: `vision`'s defaults with body["prism"] applied.
Result<frontends::VisualBudget> read_visual_budget(const frontends::VisionProcessor& vision,
                                                           const nlohmann::ordered_json& body, ApiError& error);

// Reads, decodes and prepares every part under `budget` (detail "low": no tiles for that
// image). Errors: 400 naming the part (param = its name), 500 for a bug (logged by the caller).
Result<std::vector<frontends::PreparedMedia>> prepare_media_parts(
    const frontends::VisionProcessor& vision, std::span<const MediaPart> parts,
    const frontends::VisualBudget& budget, ApiError& error);

}  // namespace prism::api
