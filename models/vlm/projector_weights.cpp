// load_projector_linear: one checked nn.Linear, packed.
#include "models/vlm/projector_weights.h"

#include "models/common/weight_loading.h"

namespace prism::models {

Result<ops::LinearWeight> load_projector_linear(const formats::WeightSource& weights, const std::string& base,
                                                int64_t out, int64_t in, bool with_bias, ops::Precision precision) {
  const DType dtype = common::stored_float_dtype(weights, base + ".weight");
  PRISM_ASSIGN_OR_RETURN(const Tensor weight, weights.get(base + ".weight", {out, in}, dtype));
  Tensor bias;
  if (with_bias) {
    PRISM_ASSIGN_OR_RETURN(bias, weights.get(base + ".bias", {out}, DType::f32));
  }
  return ops::pack_linear(weight, bias, precision);
}

}  // namespace prism::models
