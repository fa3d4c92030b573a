// prism tokenize --model DIR [--no-special] [--decode]: a thin shell over text::Tokenizer.
// Input bytes are passed through untouched: the tokenizer itself repairs invalid UTF-8.
#include "app/tokenize.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <sstream>
#include <vector>

#include "text/tokenizer.h"

namespace prism::app {
namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

// Whitespace-separated decimal ids; false with a message naming the bad word.
bool parse_ids(const std::string& text, std::vector<text::TokenId>& ids, std::string& error) {
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(word.c_str(), &end, 10);
    if (end == word.c_str() || *end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX) {
      error = "'" + word + "' is not a token id";
      return false;
    }
    ids.push_back(static_cast<text::TokenId>(v));
  }
  return true;
}

}  // namespace

int run_tokenize(const std::string& model_dir, bool no_special, bool decode) {
  auto tokenizer = text::Tokenizer::load(model_dir);
  if (!tokenizer) {
    std::fprintf(stderr, "prism tokenize: %s\n", tokenizer.status().message().c_str());
    return 1;
  }
  const std::string input = read_stdin();
  if (decode) {
    std::vector<text::TokenId> ids;
    std::string error;
    if (!parse_ids(input, ids, error)) {
      std::fprintf(stderr, "prism tokenize --decode: %s\n", error.c_str());
      return 1;
    }
    auto out = tokenizer->decode(ids, /*skip_special_tokens=*/no_special);
    if (!out) {
      std::fprintf(stderr, "prism tokenize --decode: %s\n", out.status().message().c_str());
      return 1;
    }
    std::fwrite(out->data(), 1, out->size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  // Truncation and padding are for model batches; the command shows the whole text's ids.
  tokenizer->set_truncation(std::nullopt);
  tokenizer->set_padding(std::nullopt);
  const text::Encoding e = tokenizer->encode(input, /*add_special_tokens=*/!no_special);
  std::string line;
  for (size_t i = 0; i < e.ids.size(); ++i) {
    if (i) line.push_back(' ');
    line += std::to_string(e.ids[i]);
  }
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

}  // namespace prism::app
