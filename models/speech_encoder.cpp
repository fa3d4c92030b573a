// models/speech_encoder.cpp: CrossKv's size, for the engine's memory accounting.
#include "models/speech_encoder.h"

namespace prism::models {

int64_t CrossKv::bytes() const {
  int64_t n = 0;
  for (const Tensor& t : k) n += int64_t(t.nbytes());
  for (const Tensor& t : v) n += int64_t(t.nbytes());
  return n;
}

}  // namespace prism::models
