// engines/generate/text_output.h: the text output stage. Each choice's tokens go through its
// own incremental detokenizer (detokenizer.h): settled text is appended to the choice's
// output, stop strings end it (never before min_tokens output tokens). It must not sample or
// decide lengths (the core does).
#pragma once

#include "engines/generate/output_stage.h"
#include "text/tokenizer.h"

namespace prism::engines::generate {

class TextOutput final : public OutputStage {
 public:
  explicit TextOutput(const text::Tokenizer& tokenizer) : tokenizer_(tokenizer) {}  // outlives the stage
  void start(Sequence& s) const override;
  bool push(Sequence& s, int32_t token) const override;
  void flush(Sequence& s) const override;

 private:
  const text::Tokenizer& tokenizer_;
};

}  // namespace prism::engines::generate
