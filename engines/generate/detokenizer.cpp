// engines/generate/detokenizer.cpp: a choice's text as its tokens arrive, by decoding a short
// window of tokens each step and emitting what the newest token added (the approach of HF
// TGI's and vLLM's incremental detokenizers, written here from the idea).
//
// NOTE: the text emitted so far is always a prefix of decode(context + all tokens) minus the
// context's own text. Two things could break that and are held back until settled:
//  - an incomplete UTF-8 character at the end of a decode (byte-level BPE and byte-fallback
//    pieces split characters across tokens): the decoder renders it as trailing U+FFFD;
//  - text that may still become a stop string: the longest suffix of the pending text that
//    is a prefix of a stop string.
#include "engines/generate/detokenizer.h"

#include <algorithm>

#include "text/utf8.h"

namespace prism::engines::generate {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

bool ends_with_replacement(std::string_view s) { return s.ends_with(kReplacement); }

// The longest suffix of text that is a proper prefix of one of the stop strings.
size_t stop_prefix_suffix(std::string_view text, const std::vector<std::string>& stop) {
  size_t hold = 0;
  for (const std::string& s : stop) {
    for (size_t len = std::min(s.size() - 1, text.size()); len > hold; --len) {
      if (text.ends_with(std::string_view(s).substr(0, len))) {
        hold = len;
        break;
      }
    }
  }
  return hold;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const text::Tokenizer& tokenizer, std::span<const int32_t> prompt_tail,
                                               std::vector<std::string> stop, bool skip_special_tokens,
                                               int min_tokens)
    : tokenizer_(tokenizer), stop_(std::move(stop)), skip_special_(skip_special_tokens), min_tokens_(min_tokens) {
  std::erase_if(stop_, [](const std::string& s) { return s.empty(); });
  // Ids the tokenizer does not know are left out of the context (they have no text).
  for (int32_t t : prompt_tail)
    if (t >= 0 && t < tokenizer_.vocab_size()) tokens_.push_back(t);
  // A context that ends inside a character (a token-id prompt can) would shift every byte
  // offset: the context stops at its last whole character instead.
  std::string context;
  while (!tokens_.empty() && (!decode_window(tokens_.size(), context) || ends_with_replacement(context)))
    tokens_.pop_back();
  read_offset_ = tokens_.size();
}

bool IncrementalDetokenizer::decode_window(size_t end, std::string& out) const {
  const std::span<const int32_t> window(tokens_.data() + prefix_offset_, end - prefix_offset_);
  if (window.empty()) {
    out.clear();
    return true;
  }
  auto text = tokenizer_.decode(window, skip_special_);
  if (!text) return false;
  out = std::move(*text);
  return true;
}

IncrementalDetokenizer::Step IncrementalDetokenizer::settle(std::string text, bool final) {
  Step step;
  pending_ += text;
  // The earliest stop string wins; the text ends before it. Before min_tokens output tokens
  // there are no stop strings: everything settles.
  const bool stops_active = num_pushed_ > min_tokens_;
  size_t stop_at = std::string::npos;
  if (stops_active)
    for (const std::string& s : stop_) stop_at = std::min(stop_at, pending_.find(s));
  if (stop_at != std::string::npos) {
    step.text = pending_.substr(0, stop_at);
    step.stopped = true;
    stopped_ = true;
    pending_.clear();
  } else {
    const size_t hold = final || !stops_active ? 0 : stop_prefix_suffix(pending_, stop_);
    step.text = pending_.substr(0, pending_.size() - hold);
    pending_.erase(0, pending_.size() - hold);
  }
  emitted_ += step.text;
  return step;
}

IncrementalDetokenizer::Step IncrementalDetokenizer::push(int32_t token) {
  if (stopped_) return {.text = {}, .stopped = true};
  ++num_pushed_;
  if (token < 0 || token >= tokenizer_.vocab_size()) return {};  // no text (e.g. a padded vocabulary row)
  tokens_.push_back(token);
  std::string prefix, full;
  if (!decode_window(read_offset_, prefix) || !decode_window(tokens_.size(), full)) {
    tokens_.pop_back();
    return {};
  }
  const size_t done = prefix.size() + window_emitted_;
  std::string added;
  if (ends_with_replacement(full)) {
    // An incomplete character may end the window: emit only what precedes it, and keep the
    // window (the next tokens complete the character). The whole trailing run of U+FFFD is
    // held: SentencePiece renders each byte of an incomplete character as its own U+FFFD.
    size_t settled = full.size();
    while (ends_with_replacement(std::string_view(full).substr(0, settled))) settled -= kReplacement.size();
    if (settled > done) {
      added = full.substr(done, settled - done);
      window_emitted_ += added.size();
    }
  } else {
    if (full.size() > done) added = full.substr(done);
    // The window's text ends on a whole character: the next window starts at the old read
    // offset, which keeps one step of context (a SentencePiece decode drops the leading
    // space of its first piece; the context piece absorbs that).
    if (full.size() > prefix.size()) {
      prefix_offset_ = read_offset_;
      read_offset_ = tokens_.size();
      window_emitted_ = 0;
    }
  }
  if (added.empty()) return {};
  // NOTE: whole characters by construction; the repair is a guard for decoders whose text
  // for a window is not an extension of the text for its prefix.
  return settle(text::to_valid_utf8(added), /*final=*/false);
}

std::string IncrementalDetokenizer::finish() {
  if (stopped_) return {};
  std::string prefix, full, added;
  if (decode_window(read_offset_, prefix) && decode_window(tokens_.size(), full)) {
    const size_t done = prefix.size() + window_emitted_;
    if (full.size() > done) added = text::to_valid_utf8(full.substr(done));
  }
  Step step = settle(std::move(added), /*final=*/true);
  stopped_ = true;
  return std::move(step.text);
}

}  // namespace prism::engines::generate
