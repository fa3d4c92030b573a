// models/common/activation.h: a config's activation (configs/activation.h, plain data) as the
// op the linears fuse. The only place the two enums meet.
#pragma once

#include "configs/activation.h"
#include "runtime/ops.h"

namespace prism::models::common {

inline ops::Activation op_activation(configs::Activation a) {
  switch (a) {
    case configs::Activation::gelu_erf: return ops::Activation::gelu_erf;
    case configs::Activation::gelu_tanh: return ops::Activation::gelu_tanh;
    case configs::Activation::relu: return ops::Activation::relu;
    case configs::Activation::quick_gelu: return ops::Activation::quick_gelu;
  }
  return ops::Activation::none;
}

}  // namespace prism::models::common
