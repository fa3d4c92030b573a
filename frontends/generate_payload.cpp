// frontends/generate_payload.cpp: the payload types are plain data; only the finish
// reason needs its OpenAI name.
#include "frontends/generate_payload.h"

namespace prism::frontends {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop: return "stop";
    case FinishReason::length: return "length";
  }
  return "stop";
}

}  // namespace prism::frontends
