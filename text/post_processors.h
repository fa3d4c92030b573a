// Post-processors: the pipeline stage after the model, adding special tokens ([CLS] ... [SEP],
// <s> ... </s>) and type ids around one text or a pair (Hugging Face semantics). Ids only:
// they never see text.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "text/encoding.h"

namespace prism::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // How many special tokens process adds to a single text or a pair (truncation reserves them).
  virtual size_t num_added_tokens(bool pair) const = 0;
  // encodings: one (single) or two (pair) in; processors that add special tokens merge them
  // into one. With add_special_tokens false they still merge but add nothing.
  virtual void process(std::vector<Encoding>& encodings, bool add_special_tokens) const = 0;
};

// One element of a template: the sequence A or B, or a named special token; with its type id.
struct TemplatePiece {
  bool is_sequence = false;
  std::string name;  // "A"/"B" for sequences; the special token's key otherwise
  int32_t type_id = 0;
};

class TemplateProcessor : public PostProcessor {
 public:
  // special_tokens: key -> ids it expands to. Every special key in the templates must be in it.
  TemplateProcessor(std::vector<TemplatePiece> single, std::vector<TemplatePiece> pair,
                    std::map<std::string, std::vector<TokenId>> special_tokens)
      : single_(std::move(single)), pair_(std::move(pair)), special_tokens_(std::move(special_tokens)) {}
  size_t num_added_tokens(bool pair) const override;
  void process(std::vector<Encoding>& encodings, bool add_special_tokens) const override;

 private:
  std::vector<TemplatePiece> single_, pair_;
  std::map<std::string, std::vector<TokenId>> special_tokens_;
};

// [CLS] A [SEP] / [CLS] A [SEP] B [SEP], B and its [SEP] with type id 1.
class BertProcessor : public PostProcessor {
 public:
  BertProcessor(TokenId cls, TokenId sep) : cls_(cls), sep_(sep) {}
  size_t num_added_tokens(bool pair) const override { return pair ? 3 : 2; }
  void process(std::vector<Encoding>& encodings, bool add_special_tokens) const override;

 private:
  TokenId cls_, sep_;
};

// <s> A </s> / <s> A </s> </s> B </s>, every type id 0. (trim_offsets is moot without offsets.)
class RobertaProcessor : public PostProcessor {
 public:
  RobertaProcessor(TokenId cls, TokenId sep) : cls_(cls), sep_(sep) {}
  size_t num_added_tokens(bool pair) const override { return pair ? 4 : 2; }
  void process(std::vector<Encoding>& encodings, bool add_special_tokens) const override;

 private:
  TokenId cls_, sep_;
};

// ByteLevel's post-processing only trims offsets: on ids it is the identity.
class IdentityProcessor : public PostProcessor {
 public:
  size_t num_added_tokens(bool) const override { return 0; }
  void process(std::vector<Encoding>&, bool) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  size_t num_added_tokens(bool pair) const override;
  void process(std::vector<Encoding>& encodings, bool add_special_tokens) const override;

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

}  // namespace prism::text
