// Lexer: see lexer.h. NOTE: whitespace handling mirrors jinja2 3.1's lexer rule by rule
// (including its "line_starting" flag for lstrip_blocks), since chat templates rely on it
// for every newline they emit.
#include "text/jinja/lexer.h"

#include <cstring>

#include "text/jinja/value.h"

namespace prism::text::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int count_newlines(std::string_view s, size_t from, size_t to) {
  int n = 0;
  for (size_t i = from; i < to; ++i) n += s[i] == '\n';
  return n;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  Result<std::vector<Token>> run() {
    while (pos_ < src_.size()) {
      const size_t start = find_tag(pos_);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      const char kind = src_[start + 1];
      size_t p = start + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || (src_[p] == '+' && kind != '{'))) sign = src_[p++];
      std::string text = src_.substr(pos_, start - pos_);
      line_ += count_newlines(src_, pos_, start);
      emit_text(strip_before_tag(std::move(text), sign, kind != '{'));
      if (kind == '#') {
        PRISM_RETURN_IF_ERROR(comment(p));
      } else if (kind == '%' && raw_begin(p)) {
        PRISM_RETURN_IF_ERROR(raw(p));
      } else {
        PRISM_RETURN_IF_ERROR(tag(kind, p));
      }
    }
    out_.push_back({Token::Type::eof, "", line_});
    return std::move(out_);
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1))
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  // "-": strip all whitespace before the tag. Otherwise lstrip_blocks: a block or comment
  // tag preceded on its line only by spaces/tabs takes them away ("+" keeps them).
  std::string strip_before_tag(std::string text, char sign, bool is_block) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && is_block) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool blank = true;
        for (size_t i = l_pos; i < text.size(); ++i) blank &= text[i] == ' ' || text[i] == '\t';
        if (blank) text.resize(l_pos);
      }
    }
    return text;
  }

  void emit_text(std::string text) {
    if (!text.empty()) out_.push_back({Token::Type::text, std::move(text), line_});
  }

  // Consumes a tag end at p (of length len): "-" strips following whitespace; "+" keeps it;
  // otherwise trim_blocks drops one newline (block and comment tags only).
  void finish_tag(size_t p, size_t len, char sign, bool trim_newline) {
    const size_t match_start = p;
    p += len;
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && trim_newline && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    line_ += count_newlines(src_, match_start, p);
    line_starting_ = src_[p - 1] == '\n';
    pos_ = p;
  }

  Status comment(size_t p) {
    const size_t end = src_.find("#}", p);
    if (end == std::string::npos) return error("unterminated comment");
    line_ += count_newlines(src_, p, end);
    char sign = 0;
    size_t at = end;
    if (end > p && (src_[end - 1] == '-' || src_[end - 1] == '+')) sign = src_[--at];
    finish_tag(at, end + 2 - at, sign, true);
    return Status();
  }

  bool raw_begin(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3]))) return false;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    return src_.compare(p, 2, "%}") == 0 || src_.compare(p, 3, "-%}") == 0;
  }

  Status raw(size_t p) {
    // {% raw %} end: no trim_blocks newline (jinja2's raw_begin rule has none).
    while (is_space(src_[p])) ++p;
    p += 3;
    while (is_space(src_[p])) ++p;
    if (src_[p] == '-') {
      finish_tag(p, 3, '-', false);
    } else {
      finish_tag(p, 2, '+', false);
    }
    for (size_t i = src_.find("{%", pos_); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t q = i + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      char end_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, i - pos_);
      line_ += count_newlines(src_, pos_, i);
      emit_text(strip_before_tag(std::move(text), sign, true));
      finish_tag(end_sign ? q - 1 : q, end_sign ? 3 : 2, end_sign, true);
      return Status();
    }
    return error("missing {% endraw %}");
  }

  Status tag(char kind, size_t p) {
    const bool block = kind == '%';
    out_.push_back({block ? Token::Type::block_begin : Token::Type::var_begin, "", line_});
    const char close = block ? '%' : '}';
    int depth = 0;  // brackets open: an end marker inside {...} is a dict brace, not the tag end
    while (true) {
      while (p < src_.size() && is_space(src_[p])) line_ += src_[p++] == '\n';
      if (p >= src_.size()) return error(block ? "unterminated block tag" : "unterminated {{ expression");
      const char c = src_[p];
      if (depth == 0) {
        if ((c == '-' || (c == '+' && block)) && p + 2 < src_.size() && src_[p + 1] == close && src_[p + 2] == '}') {
          out_.push_back({block ? Token::Type::block_end : Token::Type::var_end, "", line_});
          finish_tag(p, 3, c, block);
          return Status();
        }
        if (c == close && p + 1 < src_.size() && src_[p + 1] == '}') {
          out_.push_back({block ? Token::Type::block_end : Token::Type::var_end, "", line_});
          finish_tag(p, 2, 0, block);
          return Status();
        }
      }
      if (is_digit(c)) {
        p = number(p);
      } else if (is_name_start(c)) {
        size_t e = p;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        out_.push_back({Token::Type::name, src_.substr(p, e - p), line_});
        p = e;
      } else if (c == '\'' || c == '"') {
        PRISM_ASSIGN_OR_RETURN(p, string(p));
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~",
                                           "[",  "]",  "(",  ")",  "{",  "}",  "<", ">", "=", ".", ":", "|",
                                           ",",  ";"};
        const char* found = nullptr;
        for (const char* op : kOps)
          if (src_.compare(p, std::strlen(op), op) == 0) {
            found = op;
            break;
          }
        if (!found) return error(std::string("unexpected character '") + c + "'");
        if (*found == '(' || *found == '[' || *found == '{') ++depth;
        if ((*found == ')' || *found == ']' || *found == '}') && depth > 0) --depth;
        out_.push_back({Token::Type::op, found, line_});
        p += std::strlen(found);
      }
    }
  }

  size_t number(size_t p) {
    auto digits = [&](size_t q) {
      while (q < src_.size() && (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1])))) ++q;
      return q;
    };
    size_t e = digits(p);
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t q = e + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && is_digit(src_[q])) {
        e = digits(q);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    out_.push_back({is_float ? Token::Type::floating : Token::Type::integer, text, line_});
    return e;
  }

  // Python string literal escapes (jinja2 decodes with "unicode-escape").
  Result<size_t> string(size_t p) {
    const char quote = src_[p++];
    std::string out;
    while (true) {
      if (p >= src_.size()) return error("unterminated string");
      const char c = src_[p];
      if (c == quote) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return error("unterminated string");
      const char e = src_[p + 1];
      p += 2;
      auto hex = [&](int n) -> Result<char32_t> {
        if (p + n > src_.size()) return error("truncated \\x/\\u escape");
        char32_t v = 0;
        for (int i = 0; i < n; ++i) {
          const char h = src_[p + i];
          const int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
          if (d < 0) return error("bad hex digit in string escape");
          v = v * 16 + d;
        }
        p += n;
        return v;
      };
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          PRISM_ASSIGN_OR_RETURN(char32_t cp, hex(e == 'x' ? 2 : e == 'u' ? 4 : 8));
          out += utf8_encode(std::u32string(1, cp));
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = e - '0';
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) v = v * 8 + (src_[p++] - '0');
            out += utf8_encode(std::u32string(1, v));
          } else if (e == 'N') {
            return error("unsupported \\N{...} string escape");
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    out_.push_back({Token::Type::string, std::move(out), line_});
    return p + 1;
  }

  Status error(const std::string& what) const {
    return invalid_argument("chat template: " + what + " at line " + std::to_string(line_));
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source) {
  // jinja2 normalises newlines to "\n" and drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src += source[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(std::move(src)).run();
}

}  // namespace prism::text::jinja
