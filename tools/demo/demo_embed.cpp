// tools/demo/demo_embed.cpp: writing the demo embedding model. Weights come from std::mt19937
// mapped to uniform floats by hand (std's distributions differ between standard libraries), so
// the checkpoint, and its embedding space id, are the same everywhere.
#include "tools/demo/demo_embed.h"

#include <cctype>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "formats/safetensors.h"
#include "runtime/tensor.h"

namespace prism::tools::demo {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Shape of the demo encoder: MiniLM-like, smaller.
constexpr int64_t kHidden = 128;
constexpr int64_t kHeads = 2;
constexpr int64_t kLayers = 2;
constexpr int64_t kIntermediate = 256;
constexpr int64_t kMaxPositions = 512;
constexpr int64_t kTypeVocab = 2;
constexpr uint32_t kSeed = 20240501;

constexpr const char* kSpecials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};  // ids 0..4

// Common English words: whole-word entries of the vocabulary, so ordinary sentences tokenize
// mostly to words rather than letters.
constexpr std::string_view kWords = R"(
the of and to in is was for that on as with by he at from it his an were are which this be
or has had not but first one their its new after who they have her she two been other when
there all during into school time may years more most only over city some world would where
later up such used many can state about national out known university united then made also
team film three well so between any both how him what world year could around new game each
season while through before under high part number since world life work city people just
game like well back even still way take get make go see know think come look want give use
find tell ask seem feel try leave call good great little own old right big long small large
next early young important few public bad same able last different home water room mother
area money story fact month lot study book eye job word business issue side kind head house
service friend father power hour line end member law car name president minute idea body
information nothing ago lead social understand whether watch together follow around parent
stop face anything create page speak read allow add spend grow open walk win offer remember
love consider appear buy wait serve die send expect build stay fall cut reach kill remain
suggest raise pass sell require report decide pull sense art war history party result change
morning reason research girl guy moment air teacher force education foot boy age policy
everything process music market sense nation plan college interest death experience effect
class control care field development role effort rate heart drug show leader light voice
wife police mind price report decision son view relationship town road arm true federal
difference value building action model season society tax director position player record
paper space ground form event official matter center couple site project activity star table
need court american oil situation cost industry figure street image phone data picture
practice piece land product doctor wall patient worker news test movie north love support
technology step baby computer type attention film tree source organization hair window
evidence population site training guess security president sort floor hospital church
range risk fire future wrong defense increase rise sea network space dog computer text
question problem system program government company number group country week night point
hand place case work school family student state right thing man woman child day year
mr mrs ms dr new old big small good bad high low long short hot cold fast slow happy sad
black white red green blue yellow brown gray orange purple pink dark bright clean dirty
easy hard early late full empty rich poor strong weak heavy light young free true false
open close begin start finish stop run walk talk sing dance play write read draw paint
eat drink cook sleep wake sit stand lie jump swim fly drive ride climb throw catch kick
push pull carry hold drop lift turn move put set keep let help show hear listen see watch
say said says tell told ask asked answer call called name named mean meant know knew known
think thought feel felt seem seemed become became come came go went gone get got give gave
take took make made find found leave left bring brought buy bought pay paid send sent
build built lose lost meet met run ran sit sat speak spoke stand stood understand understood
win won write wrote written begin began break broke choose chose forget forgot grow grew
very really quite too also just only even still already yet again always never often
sometimes usually ever here there now then today tomorrow yesterday soon later once twice
above below under over near far inside outside between behind front across along against
among around before after during until since without within about through toward upon
and but or nor so because although though unless while if whether than that which who whom
whose what when where why how all any some many much more most few less least each every
no none one two three four five six seven eight nine ten hundred thousand million billion
first second third fourth fifth last next other another same such own several enough
i me my mine you your yours he him his she her hers it its we us our ours they them their
theirs this that these those myself yourself himself herself itself ourselves themselves
am is are was were be been being have has had having do does did doing done will would
shall should can could may might must need dare ought
apple banana bread butter cheese chicken coffee egg fish fruit meat milk rice salt sugar tea
cake soup salad pizza pasta juice wine beer water ice orange lemon tomato potato onion
cat dog horse cow pig sheep bird fish mouse lion tiger bear wolf fox rabbit snake monkey
sun moon star sky cloud rain snow wind storm weather summer winter spring autumn fall
river lake ocean sea mountain hill forest desert island beach valley field garden park
city town village country street road bridge building house home room kitchen bedroom
door window wall floor roof table chair bed desk lamp clock mirror shelf box bag bottle
cup glass plate bowl knife fork spoon pan pot oven fridge sink shower bath towel soap
car bus train plane ship boat bicycle bike truck taxi station airport port ticket trip
travel journey map guide hotel restaurant shop store market bank office factory farm
school class lesson teacher student book pen pencil paper letter word sentence language
english french german spanish chinese japanese math science physics chemistry biology
history geography art music sport football soccer tennis basketball baseball golf game
computer phone screen keyboard mouse internet email website software hardware code program
search query document vector embedding model server request response error token text
doctor nurse hospital medicine health disease pain heart blood brain bone skin hand foot
head face eye ear nose mouth tooth hair arm leg finger neck back shoulder knee stomach
man woman boy girl child baby person people friend family mother father parent son
daughter brother sister husband wife uncle aunt cousin grandmother grandfather king queen
money price cost pay buy sell market trade business company job work worker boss salary
time day night week month year hour minute second morning afternoon evening noon midnight
monday tuesday wednesday thursday friday saturday sunday january february march april
june july august september october november december holiday birthday party gift
happy sad angry afraid tired hungry thirsty sick well busy bored excited worried surprised
beautiful ugly pretty handsome nice kind friendly polite rude funny serious quiet loud
important interesting boring difficult simple possible impossible necessary popular famous
quick quickly slowly well better best worse worst more less much many little big bigger
biggest small smaller smallest great greater greatest good bad new newer newest
)";

// Suffix pieces that make ordinary derived words cheaper than letter by letter.
constexpr const char* kSuffixes[] = {"s",   "es",   "ed",   "ing", "er",   "est", "ly",   "ness", "ment", "tion",
                                     "sion", "able", "ible", "al",  "ful",  "less", "ous", "ive",  "ity",  "ize",
                                     "ise", "ist",  "ism",  "ance", "ence", "ship", "hood", "ward", "wise", "y"};

// The vocabulary in id order: specials, characters and their ##-forms, words, suffixes, then
// every two-letter piece (word-initial and ##) so any lowercase word splits without [UNK].
std::vector<std::string> demo_vocabulary() {
  std::vector<std::string> vocab;
  std::set<std::string> seen;
  auto add = [&](std::string token) {
    if (seen.insert(token).second) vocab.push_back(std::move(token));
  };
  for (const char* s : kSpecials) add(s);
  std::string chars;
  for (char c = 'a'; c <= 'z'; ++c) chars += c;
  for (char c = '0'; c <= '9'; ++c) chars += c;
  for (char c = '!'; c <= '~'; ++c)
    if (!std::isalnum(static_cast<unsigned char>(c))) chars += c;  // ASCII punctuation: BertPreTokenizer splits on it
  for (char c : chars) add(std::string(1, c));
  for (char c : chars) add("##" + std::string(1, c));
  std::string word;
  for (char c : kWords) {
    if (c >= 'a' && c <= 'z') {
      word += c;
    } else if (!word.empty()) {
      add(std::move(word));
      word.clear();
    }
  }
  for (const char* s : kSuffixes) add(std::string("##") + s);
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) add(std::string{a, b});
  for (char a = 'a'; a <= 'z'; ++a)
    for (char b = 'a'; b <= 'z'; ++b) add(std::string("##") + std::string{a, b});
  return vocab;
}

json special_token(const std::string& content, int id) {
  return {{"id", id},          {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},   {"normalized", false}, {"special", true}};
}

json template_piece(const char* kind, const char* id, int type_id) {
  return {{kind, {{"id", id}, {"type_id", type_id}}}};
}

// A Hugging Face tokenizer.json as BertTokenizerFast saves it.
json tokenizer_json(const std::vector<std::string>& vocab) {
  json vocab_map = json::object();
  for (size_t i = 0; i < vocab.size(); ++i) vocab_map[vocab[i]] = static_cast<int>(i);
  json added = json::array();
  for (int i = 0; i < static_cast<int>(std::size(kSpecials)); ++i) added.push_back(special_token(kSpecials[i], i));
  json specials = {{"[CLS]", {{"id", "[CLS]"}, {"ids", {2}}, {"tokens", {"[CLS]"}}}},
                   {"[SEP]", {{"id", "[SEP]"}, {"ids", {3}}, {"tokens", {"[SEP]"}}}}};
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "BertNormalizer"},
        {"clean_text", true},
        {"handle_chinese_chars", true},
        {"strip_accents", nullptr},
        {"lowercase", true}}},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {template_piece("SpecialToken", "[CLS]", 0), template_piece("Sequence", "A", 0),
                    template_piece("SpecialToken", "[SEP]", 0)}},
        {"pair", {template_piece("SpecialToken", "[CLS]", 0), template_piece("Sequence", "A", 0),
                  template_piece("SpecialToken", "[SEP]", 0), template_piece("Sequence", "B", 1),
                  template_piece("SpecialToken", "[SEP]", 1)}},
        {"special_tokens", specials}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
      {"model",
       {{"type", "WordPiece"},
        {"unk_token", "[UNK]"},
        {"continuing_subword_prefix", "##"},
        {"max_input_chars_per_word", 100},
        {"vocab", vocab_map}}},
  };
}

json bert_config(int64_t vocab_size) {
  return {{"architectures", {"BertModel"}},
          {"model_type", "bert"},
          {"attention_probs_dropout_prob", 0.1},
          {"hidden_act", "gelu"},
          {"hidden_dropout_prob", 0.1},
          {"hidden_size", kHidden},
          {"initializer_range", 0.02},
          {"intermediate_size", kIntermediate},
          {"layer_norm_eps", 1e-12},
          {"max_position_embeddings", kMaxPositions},
          {"num_attention_heads", kHeads},
          {"num_hidden_layers", kLayers},
          {"pad_token_id", 0},
          {"position_embedding_type", "absolute"},
          {"torch_dtype", "float32"},
          {"type_vocab_size", kTypeVocab},
          {"use_cache", true},
          {"vocab_size", vocab_size}};
}

// Random tensors from one seeded stream, in the order they are made.
class WeightMaker {
 public:
  explicit WeightMaker(uint32_t seed) : rng_(seed) {}

  // center + uniform(-scale, scale) per element.
  Tensor make(const Dims& shape, float center, float scale) {
    Tensor t = Tensor::empty(shape, DType::f32);
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) {
      const float u = static_cast<float>(rng_() >> 8) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
      p[i] = center + scale * (2.0f * u - 1.0f);
    }
    return t;
  }
  // BERT initialises with std 0.02: uniform of the same spread.
  Tensor weight(const Dims& shape) { return make(shape, 0.0f, 0.0346f); }
  // Layer norms near identity, perturbed so they matter.
  Tensor norm_weight() { return make({kHidden}, 1.0f, 0.1f); }
  Tensor bias(int64_t n) { return make({n}, 0.0f, 0.02f); }

 private:
  std::mt19937 rng_;
};

// BertModel's tensors under their Hugging Face names (no "bert." prefix: sentence-transformers
// saves the bare BertModel), pooler included as in all-MiniLM-L6-v2.
std::vector<std::pair<std::string, Tensor>> bert_weights(int64_t vocab_size) {
  WeightMaker w(kSeed);
  std::vector<std::pair<std::string, Tensor>> t;
  t.emplace_back("embeddings.word_embeddings.weight", w.weight({vocab_size, kHidden}));
  t.emplace_back("embeddings.position_embeddings.weight", w.weight({kMaxPositions, kHidden}));
  t.emplace_back("embeddings.token_type_embeddings.weight", w.weight({kTypeVocab, kHidden}));
  t.emplace_back("embeddings.LayerNorm.weight", w.norm_weight());
  t.emplace_back("embeddings.LayerNorm.bias", w.bias(kHidden));
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    for (const char* proj : {"query", "key", "value"}) {
      t.emplace_back(p + "attention.self." + proj + ".weight", w.weight({kHidden, kHidden}));
      t.emplace_back(p + "attention.self." + proj + ".bias", w.bias(kHidden));
    }
    t.emplace_back(p + "attention.output.dense.weight", w.weight({kHidden, kHidden}));
    t.emplace_back(p + "attention.output.dense.bias", w.bias(kHidden));
    t.emplace_back(p + "attention.output.LayerNorm.weight", w.norm_weight());
    t.emplace_back(p + "attention.output.LayerNorm.bias", w.bias(kHidden));
    t.emplace_back(p + "intermediate.dense.weight", w.weight({kIntermediate, kHidden}));
    t.emplace_back(p + "intermediate.dense.bias", w.bias(kIntermediate));
    t.emplace_back(p + "output.dense.weight", w.weight({kHidden, kIntermediate}));
    t.emplace_back(p + "output.dense.bias", w.bias(kHidden));
    t.emplace_back(p + "output.LayerNorm.weight", w.norm_weight());
    t.emplace_back(p + "output.LayerNorm.bias", w.bias(kHidden));
  }
  t.emplace_back("pooler.dense.weight", w.weight({kHidden, kHidden}));
  t.emplace_back("pooler.dense.bias", w.bias(kHidden));
  return t;
}

Status write_json(const fs::path& path, const json& j) { return write_file(path.string(), j.dump(2) + "\n"); }

}  // namespace

Status write_demo_embed(const fs::path& dir) {
  const std::vector<std::string> vocab = demo_vocabulary();
  const auto vocab_size = static_cast<int64_t>(vocab.size());
  PRISM_RETURN_IF_ERROR(write_json(dir / "config.json", bert_config(vocab_size)));
  PRISM_RETURN_IF_ERROR(
      formats::write_safetensors((dir / "model.safetensors").string(), bert_weights(vocab_size), {{"format", "pt"}}));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer.json", tokenizer_json(vocab)));
  PRISM_RETURN_IF_ERROR(write_json(dir / "tokenizer_config.json",
                                   {{"tokenizer_class", "BertTokenizer"},
                                    {"do_lower_case", true},
                                    {"model_max_length", kMaxPositions},
                                    {"cls_token", "[CLS]"},
                                    {"sep_token", "[SEP]"},
                                    {"pad_token", "[PAD]"},
                                    {"unk_token", "[UNK]"},
                                    {"mask_token", "[MASK]"}}));
  PRISM_RETURN_IF_ERROR(write_json(
      dir / "modules.json",
      json::array({{{"idx", 0}, {"name", "0"}, {"path", ""}, {"type", "sentence_transformers.models.Transformer"}},
                   {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"}, {"type", "sentence_transformers.models.Pooling"}},
                   {{"idx", 2},
                    {"name", "2"},
                    {"path", "2_Normalize"},
                    {"type", "sentence_transformers.models.Normalize"}}})));
  PRISM_RETURN_IF_ERROR(
      write_json(dir / "sentence_bert_config.json", {{"max_seq_length", kMaxPositions}, {"do_lower_case", false}}));
  std::error_code ec;
  fs::create_directories(dir / "1_Pooling", ec);
  fs::create_directories(dir / "2_Normalize", ec);
  if (ec) return internal_error("cannot create the module folders in " + dir.string() + ": " + ec.message());
  PRISM_RETURN_IF_ERROR(write_json(dir / "1_Pooling" / "config.json",
                                   {{"word_embedding_dimension", kHidden},
                                    {"pooling_mode_cls_token", false},
                                    {"pooling_mode_mean_tokens", true},
                                    {"pooling_mode_max_tokens", false},
                                    {"pooling_mode_mean_sqrt_len_tokens", false},
                                    {"pooling_mode_weightedmean_tokens", false},
                                    {"pooling_mode_lasttoken", false},
                                    {"include_prompt", true}}));
  return write_file((dir / "README.txt").string(),
                    "Prism demo deployment 'demo-embed': a tiny BERT encoder (hidden 128, 2 layers, 2 heads) with\n"
                    "random weights in the sentence-transformers layout (mean pooling, L2-normalised), and a small\n"
                    "WordPiece vocabulary. It serves POST /v1/embeddings; its vectors are meaningless.\n");
}

}  // namespace prism::tools::demo
