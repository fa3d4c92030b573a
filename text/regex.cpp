// PCRE2 wrapper. NOTE: the compiled code is immutable and shared; match data is per thread
// (created once, reused by every search of that thread), so concurrent searches from the
// OpenMP batch encoder never share state and a search never allocates.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "text/utf8.h"

namespace prism::text {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("regex '" + pattern + "' does not compile at offset " +
                            std::to_string(error_offset) + ": " + reinterpret_cast<char*>(message));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // interpreter when JIT is absent
  Regex r;
  r.code_ = std::move(owned);
  r.pattern_ = pattern;
  return r;
}

Result<Regex> Regex::literal(const std::string& literal) {
  std::string escaped = "\\Q";
  // \Q...\E quotes everything but a literal "\E", which is split out.
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.compare(i, 2, "\\E") == 0) {
      escaped += "\\E\\\\E\\Q";
      ++i;
    } else {
      escaped += literal[i];
    }
  }
  escaped += "\\E";
  return compile(escaped);
}

namespace {

// One ovector pair is all a search needs: only the whole match is read (a smaller ovector than
// the pattern's groups makes pcre2 return 0, still a match).
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder holder;
  return holder.md;
}

}  // namespace

bool Regex::find(std::string_view text, size_t pos, Match& match) const {
  if (pos > text.size()) return false;
  pcre2_match_data* md = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), pos, 0, md, nullptr)
                            : pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
  if (rc < 0) return false;  // PCRE2_ERROR_NOMATCH, or a resource limit: the rest is unmatched text
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  match = {ov[0], ov[1]};
  return true;
}

void Regex::find_all(std::string_view text, std::vector<Match>& out) const {
  size_t pos = 0;
  Match m;
  while (find(text, pos, m)) {
    out.push_back(m);
    if (m.end > m.begin) {
      pos = m.end;
    } else {
      if (m.end >= text.size()) break;
      pos = m.end + utf8_sequence_length(static_cast<unsigned char>(text[m.end]));
    }
  }
}

}  // namespace prism::text
