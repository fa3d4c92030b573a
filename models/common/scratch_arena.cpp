// models/common/scratch_arena.cpp: one scratch arena per thread (models/common/scratch_arena.h).
#include "models/common/scratch_arena.h"

namespace prism::models::common {

Arena& scratch_arena() {
  thread_local Arena arena;
  return arena;
}

}  // namespace prism::models::common
