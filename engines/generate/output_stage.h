// engines/generate/output_stage.h: what a choice's accepted tokens become. The core
// (generate_engine.cpp) samples, counts tokens and applies stop ids, max_tokens and the
// context limit; an output stage turns each accepted token into the choice's output and may
// end the choice itself. Stages today: text_output.h (text through the detokenizer, stop
// strings). Speech synthesis adds one for audio codes. A stage runs on its replica's thread
// only and keeps its per-choice state in the Sequence; it must not complete requests.
#pragma once

#include <cstdint>

#include "engines/generate/sequence.h"

namespace prism::engines::generate {

class OutputStage {
 public:
  virtual ~OutputStage() = default;
  // A new choice (at intake, or forked from choice 0 after its prefill).
  virtual void start(Sequence& s) const = 0;
  // An accepted output token that is no stop token: appended to s.output; true when the stage
  // ends the choice here (its output is final).
  virtual bool push(Sequence& s, int32_t token) const = 0;
  // The choice ends for the core's reason (a stop token, the length): what the stage held
  // back goes out.
  virtual void flush(Sequence& s) const = 0;
};

}  // namespace prism::engines::generate
