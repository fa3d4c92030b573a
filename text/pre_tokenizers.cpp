// Pre-tokenizer components. NOTE: every split keeps the pieces' order and drops empty
// results, as HF's PreTokenizedString::split does; offsets are carried only so that
// Metaspace can tell the first piece of the input from the rest. Components stream: a piece
// is cut and each result handed on before the next is found, and rewritten text lives in
// per-thread buffers, so cost and memory stay linear in the piece with no per-piece
// allocation, however long the document.
#include "text/pre_tokenizers.h"

#include <utf8proc.h>

#include "text/utf8.h"

namespace prism::text {
namespace {

// A per-thread string for the length of one call, distinct from those of enclosing calls (a
// Sequence may hold the same component twice).
class Scratch {
 public:
  Scratch() {
    auto& p = pool();
    if (p.size() <= depth()) p.push_back(std::make_unique<std::string>());
    s_ = p[depth()++].get();
    s_->clear();
  }
  ~Scratch() { --depth(); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::string& str() { return *s_; }

 private:
  static std::vector<std::unique_ptr<std::string>>& pool() {
    thread_local std::vector<std::unique_ptr<std::string>> p;
    return p;
  }
  static size_t& depth() {
    thread_local size_t d = 0;
    return d;
  }
  std::string* s_;
};

// Turns the segments of a text (delimiter or not, in order, covering it) into the pieces of
// one SplitBehavior, holding back at most one pending range. NOTE: the same groups as HF's
// SplitDelimiterBehavior over the whole list: merged_with_previous glues a delimiter to the
// group before it unless that one ended in a delimiter; merged_with_next glues a delimiter to
// a non-delimiter right after it; contiguous joins runs of the same kind. Empty segments
// (empty regex matches) take part, as in HF, and empty pieces are dropped on the way out.
class BehaviorSplitter {
 public:
  BehaviorSplitter(std::string_view text, size_t offset, SplitBehavior behavior, const PieceSink& sink)
      : text_(text), offset_(offset), behavior_(behavior), sink_(sink) {}

  void segment(size_t begin, size_t end, bool delim) {
    switch (behavior_) {
      case SplitBehavior::removed:
        if (!delim) emit(begin, end);
        break;
      case SplitBehavior::isolated:
        emit(begin, end);
        break;
      case SplitBehavior::merged_with_previous:
      case SplitBehavior::contiguous: {
        const bool join = behavior_ == SplitBehavior::contiguous ? delim == prev_delim_ : delim && !prev_delim_;
        if (join && pending_) {
          end_ = end;
        } else {
          flush();
          hold(begin, end);
        }
        break;
      }
      case SplitBehavior::merged_with_next:
        if (delim) {
          flush();
          hold(begin, end);
        } else if (pending_) {
          emit(begin_, end);
          pending_ = false;
        } else {
          emit(begin, end);
        }
        break;
    }
    prev_delim_ = delim;
  }

  // Segments from matches found one at a time: the text between matches is the other kind.
  void match(size_t begin, size_t end, bool invert) {
    if (begin > covered_) segment(covered_, begin, invert);
    segment(begin, end, !invert);
    covered_ = end;
  }
  void finish(bool invert) {
    if (covered_ < text_.size()) segment(covered_, text_.size(), invert);
    flush();
  }

 private:
  void emit(size_t begin, size_t end) const {
    if (end > begin) sink_(text_.substr(begin, end - begin), offset_ + begin);
  }
  void hold(size_t begin, size_t end) {
    begin_ = begin;
    end_ = end;
    pending_ = true;
  }
  void flush() {
    if (pending_) emit(begin_, end_);
    pending_ = false;
  }

  std::string_view text_;
  size_t offset_;
  SplitBehavior behavior_;
  const PieceSink& sink_;
  bool pending_ = false, prev_delim_ = false;
  size_t begin_ = 0, end_ = 0, covered_ = 0;
};

// Every match of regex in text, as find_all yields them, fed to the splitter.
void split_regex(const Regex& regex, std::string_view text, bool invert, BehaviorSplitter& splitter) {
  size_t pos = 0;
  Match m;
  while (regex.find(text, pos, m)) {
    splitter.match(m.begin, m.end, invert);
    if (m.end > m.begin) {
      pos = m.end;
    } else {
      if (m.end >= text.size()) break;
      pos = m.end + utf8_sequence_length(static_cast<unsigned char>(text[m.end]));
    }
  }
  splitter.finish(invert);
}

// One match per character for which pred holds.
template <class Pred>
void split_chars(std::string_view text, Pred&& pred, BehaviorSplitter& splitter) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t start = i;
    if (pred(next_code_point(text, i))) splitter.match(start, i, false);
  }
  splitter.finish(false);
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

}  // namespace

void PreTokenizer::pre_tokenize(std::vector<Piece>& pieces) const {
  std::vector<Piece> result;
  result.reserve(pieces.size() * 2);
  for (const Piece& p : pieces)
    split(p.text, p.offset, [&](std::string_view text, size_t offset) { result.push_back({std::string(text), offset}); });
  pieces = std::move(result);
}

void BertPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  size_t word_begin = 0, i = 0;
  auto emit = [&](size_t begin, size_t end) {
    if (end > begin) sink(text.substr(begin, end - begin), offset + begin);
  };
  while (i < text.size()) {
    const size_t start = i;
    const char32_t c = next_code_point(text, i);
    if (is_whitespace(c)) {
      emit(word_begin, start);
      word_begin = i;
    } else if (is_punctuation(c)) {
      emit(word_begin, start);
      emit(start, i);
      word_begin = i;
    }
  }
  emit(word_begin, text.size());
}

const std::array<std::string, 256>& byte_to_unicode() {
  // NOTE: printable Latin-1 bytes map to themselves; the other 68 to U+0100 upwards in order.
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      append_utf8(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t cp) {
  static const std::array<int16_t, 324> table = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    const auto& fwd = byte_to_unicode();
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      t[next_code_point(fwd[b], i)] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

Result<std::unique_ptr<ByteLevelPreTokenizer>> ByteLevelPreTokenizer::create(bool add_prefix_space, bool use_regex) {
  auto p = std::unique_ptr<ByteLevelPreTokenizer>(new ByteLevelPreTokenizer());
  p->add_prefix_space_ = add_prefix_space;
  if (use_regex) {
    PRISM_ASSIGN_OR_RETURN(Regex r, Regex::compile(kGpt2SplitPattern));
    p->regex_ = std::make_unique<Regex>(std::move(r));
  }
  return p;
}

void ByteLevelPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  Scratch prefixed, mapped;
  if (add_prefix_space_ && (text.empty() || text[0] != ' ')) {
    prefixed.str().reserve(text.size() + 1);
    prefixed.str().push_back(' ');
    prefixed.str().append(text);
    text = prefixed.str();
  }
  const auto& alphabet = byte_to_unicode();
  auto map_and_emit = [&](std::string_view piece, size_t piece_offset) {
    std::string& out = mapped.str();
    out.clear();
    for (unsigned char b : piece) out += alphabet[b];
    sink(out, piece_offset);
  };
  if (!regex_) {
    if (!text.empty()) map_and_emit(text, offset);
    return;
  }
  const PieceSink mapped_sink(map_and_emit);  // named: the splitter keeps a reference
  BehaviorSplitter splitter(text, offset, SplitBehavior::isolated, mapped_sink);
  split_regex(*regex_, text, false, splitter);
}

void MetaspacePreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  Scratch buffer;
  std::string& out = buffer.str();
  out.reserve(text.size() + text.size() / 4 + replacement_.size());
  const bool starts = text.size() >= 1 && text[0] == ' ';
  const bool starts_with_replacement = text.substr(0, replacement_.size()) == replacement_;
  if (!starts && !starts_with_replacement &&
      (scheme_ == PrependScheme::always || (scheme_ == PrependScheme::first && offset == 0)))
    out += replacement_;
  for (char c : text) {
    if (c == ' ') {
      out += replacement_;
    } else {
      out.push_back(c);
    }
  }
  const std::string_view mapped = out;
  if (!split_) {
    if (!mapped.empty()) sink(mapped, offset);
    return;
  }
  BehaviorSplitter splitter(mapped, offset, SplitBehavior::merged_with_next, sink);
  for (size_t pos = mapped.find(replacement_); pos != std::string_view::npos;
       pos = mapped.find(replacement_, pos + replacement_.size()))
    splitter.match(pos, pos + replacement_.size(), false);
  splitter.finish(false);
}

void SplitPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  BehaviorSplitter splitter(text, offset, behavior_, sink);
  split_regex(pattern_, text, invert_, splitter);
}

void DigitsPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  BehaviorSplitter splitter(text, offset, individual_ ? SplitBehavior::isolated : SplitBehavior::contiguous, sink);
  split_chars(text, is_numeric, splitter);
}

void PunctuationPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  BehaviorSplitter splitter(text, offset, behavior_, sink);
  split_chars(text, is_punctuation, splitter);
}

Result<std::unique_ptr<WhitespacePreTokenizer>> WhitespacePreTokenizer::create() {
  auto p = std::unique_ptr<WhitespacePreTokenizer>(new WhitespacePreTokenizer());
  PRISM_ASSIGN_OR_RETURN(Regex r, Regex::compile("\\w+|[^\\w\\s]+"));
  p->regex_ = std::make_unique<Regex>(std::move(r));
  return p;
}

void WhitespacePreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  BehaviorSplitter splitter(text, offset, SplitBehavior::removed, sink);
  split_regex(*regex_, text, /*invert=*/true, splitter);
}

void WhitespaceSplitPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  BehaviorSplitter splitter(text, offset, SplitBehavior::removed, sink);
  split_chars(text, is_whitespace, splitter);
}

void CharDelimiterSplitPreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  BehaviorSplitter splitter(text, offset, SplitBehavior::removed, sink);
  split_chars(text, [&](char32_t c) { return c == delimiter_; }, splitter);
}

// Step i's pieces go straight into step i + 1; the last step's into sink.
void SequencePreTokenizer::split(std::string_view text, size_t offset, const PieceSink& sink) const {
  struct Chain {
    const std::vector<std::unique_ptr<PreTokenizer>>& steps;
    const PieceSink& sink;
    void run(size_t step, std::string_view t, size_t o) const {
      if (step == steps.size()) {
        sink(t, o);
        return;
      }
      steps[step]->split(t, o, [&](std::string_view piece, size_t piece_offset) { run(step + 1, piece, piece_offset); });
    }
  };
  Chain{steps_, sink}.run(0, text, offset);
}

}  // namespace prism::text
