// configs/activation.h: the MLP activations config.json files name (transformers' ACT2FN
// keys), as a plain enum. Each family config accepts its own subset and says so in its
// message; models/ maps the enum onto the op it fuses (models/common/activation.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace prism::configs {

enum class Activation : uint8_t {
  gelu_erf,    // "gelu": the exact (erf) form
  gelu_tanh,   // "gelu_new", "gelu_pytorch_tanh": the tanh approximation
  relu,        // "relu"
  quick_gelu,  // "quick_gelu": x · sigmoid(1.702 x) (CLIP)
};

// The activation a config.json name stands for; none for a name Prism does not run.
inline std::optional<Activation> parse_activation(std::string_view name) {
  if (name == "gelu") return Activation::gelu_erf;
  if (name == "gelu_new" || name == "gelu_pytorch_tanh") return Activation::gelu_tanh;
  if (name == "relu") return Activation::relu;
  if (name == "quick_gelu") return Activation::quick_gelu;
  return std::nullopt;
}

}  // namespace prism::configs
