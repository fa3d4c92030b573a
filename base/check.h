// PRISM_CHECK: a broken invariant on a hot path. Aborts with file:line; never used for
// input a user can get wrong (that is a Status).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace prism::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);
}  // namespace prism::detail

#define PRISM_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      ::prism::detail::check_failed(__FILE__, __LINE__, #cond, "");                \
  } while (0)

// PRISM_CHECK_MSG(cond, "literal message")
#define PRISM_CHECK_MSG(cond, msg)                                                 \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      ::prism::detail::check_failed(__FILE__, __LINE__, #cond, msg);               \
  } while (0)
