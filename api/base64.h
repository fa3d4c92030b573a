// api/base64.h: standard base64 (RFC 4648, '=' padded) of bytes, for the binary fields of
// OpenAI's JSON bodies (embeddings as float32 bytes, generated images).
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace prism::api {

std::string base64_encode(std::span<const uint8_t> bytes);

}  // namespace prism::api
