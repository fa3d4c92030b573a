// prism tokenize: the tokenizer of a model directory on stdin/stdout.
#pragma once

#include <string>

namespace prism::app {

// Reads UTF-8 text from stdin and prints its ids space-separated on one line; no_special
// leaves out what the post-processor adds (BOS, [CLS], [SEP]). decode: ids in, text out.
// Returns the exit code: 0, or 1 with a message on stderr.
int run_tokenize(const std::string& model_dir, bool no_special, bool decode);

}  // namespace prism::app
