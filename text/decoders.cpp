// Decoder components, each a pure transformation of the token list.
#include "text/decoders.h"

#include "text/normalizers.h"
#include "text/pre_tokenizers.h"
#include "text/utf8.h"

namespace prism::text {
namespace {

void replace_in(std::string& s, std::string_view from, std::string_view to) {
  if (from.empty()) return;
  std::string out;
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, prev)) {
    out.append(s, prev, pos - prev);
    out.append(to);
    prev = pos + from.size();
  }
  if (prev == 0) return;
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

// BERT's tokenization-space cleanup (HF decoders::wordpiece::cleanup).
void cleanup(std::string& s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},     {" ,", ","},     {" ' ", "'"},       {" n't", "n't"},
      {" 'm", "'m"},   {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) replace_in(s, from, to);
}

// The byte of a "<0xAB>" token, or -1.
int byte_token_value(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = t[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return -1;
    v = v * 16 + d;
  }
  return v;
}

}  // namespace

void WordPieceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::string& t = tokens[i];
    if (i != 0) {
      if (t.compare(0, prefix_.size(), prefix_) == 0) {
        t.erase(0, prefix_.size());
      } else {
        t.insert(0, 1, ' ');
      }
    }
    if (cleanup_) cleanup(t);
  }
}

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes, token_bytes;
  for (const std::string& t : tokens) {
    // A token with any character outside the alphabet (an added token) is kept as it is.
    token_bytes.clear();
    bool mapped = true;
    size_t i = 0;
    while (i < t.size() && mapped) {
      const int b = unicode_to_byte(next_code_point(t, i));
      mapped = b >= 0;
      token_bytes.push_back(static_cast<char>(b));
    }
    bytes += mapped ? token_bytes : t;
  }
  tokens.assign(1, to_valid_utf8(bytes));
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) replace_in(tokens[i], replacement_, i == 0 && strip_first_ ? "" : " ");
}

void BpeDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) replace_in(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string bytes;
  size_t num_byte_tokens = 0;
  auto flush = [&] {
    if (num_byte_tokens == 0) return;
    if (is_valid_utf8(bytes)) {
      out.push_back(bytes);
    } else {
      for (size_t k = 0; k < num_byte_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
    }
    bytes.clear();
    num_byte_tokens = 0;
  };
  for (std::string& t : tokens) {
    const int b = byte_token_value(t);
    if (b >= 0) {
      bytes.push_back(static_cast<char>(b));
      ++num_byte_tokens;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string all;
  for (const std::string& t : tokens) all += t;
  tokens.assign(1, std::move(all));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  const size_t n = content_.size();
  for (std::string& t : tokens) {
    size_t begin = 0, end = t.size();
    for (size_t k = 0; k < start_ && end - begin >= n && t.compare(begin, n, content_) == 0; ++k) begin += n;
    for (size_t k = 0; k < stop_ && end - begin >= n && t.compare(end - n, n, content_) == 0; ++k) end -= n;
    t = t.substr(begin, end - begin);
  }
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (std::string& t : tokens) t = replace_all(pattern_, t, content_);
}

void SequenceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (const auto& step : steps_) step->decode_chain(tokens);
}

}  // namespace prism::text
