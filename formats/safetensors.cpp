// safetensors reading and writing. A file is validated completely when it is opened (header
// JSON, every dtype, shape and byte range), so get() afterwards cannot meet corrupt input and
// a model load fails early with a message naming the file and the tensor. Reading maps the
// file read-only and hands out views into the mapping; it must not copy weights except where
// the caller asks for another dtype or the stored bytes are misaligned for their type.
#include "formats/safetensors.h"


#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "formats/mapped_file.h"
#include "formats/pytorch_checkpoint.h"
#include "runtime/arena.h"

namespace prism::formats {

static_assert(std::endian::native == std::endian::little, "safetensors is little-endian");

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// HF's own reader refuses larger headers; so do we, before reading a byte of JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;


struct Entry {
  DType dtype;
  Dims shape;
  uint64_t begin = 0, end = 0;  // relative to the data section
};

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

std::string errno_text() { return std::strerror(errno); }

// Parses JSON without letting an exception escape, and reports whether any object in it has
// the same key twice: nlohmann would silently keep the last, which for a header or a weight
// map hides a corrupt file.
struct ParsedJson {
  json value;
  bool duplicate_key = false;
  std::string duplicate;
};

Result<ParsedJson> parse_json(const std::string& text, const std::string& origin) {
  ParsedJson out;
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto callback = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second && !out.duplicate_key) {
          out.duplicate_key = true;
          out.duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  try {
    out.value = json::parse(text, callback, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    return invalid_argument(origin + ": not valid JSON: " + e.what());
  }
  return out;
}

// The dtypes safetensors defines that Prism has no DType for: named in a clearer error than
// an unknown string gets.
bool is_known_unsupported_dtype(const std::string& name) {
  static const char* const kNames[] = {"BOOL",    "F64",     "I16",     "U16",     "U32", "U64",
                                       "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
  return std::find_if(std::begin(kNames), std::end(kNames), [&](const char* n) { return name == n; }) !=
         std::end(kNames);
}

// A non-negative JSON integer that fits in int64, or nothing.
std::optional<int64_t> as_index(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(INT64_MAX)) return std::nullopt;
    return int64_t(u);
  }
  if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) return std::nullopt;
    return i;
  }
  return std::nullopt;
}

Result<Entry> parse_entry(const std::string& name, const json& v, uint64_t data_bytes,
                          const std::string& where) {
  const std::string at = where + ": tensor " + in_quotes(name) + ": ";
  if (!v.is_object()) return invalid_argument(at + "entry must be an object, got " + v.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) return invalid_argument(at + "missing '" + key + "'");

  Entry e;
  const json& dtype = v["dtype"];
  if (!dtype.is_string()) return invalid_argument(at + "'dtype' must be a string, got " + dtype.type_name());
  Result<DType> dt = parse_safetensors_dtype(dtype.get<std::string>());
  if (!dt)
    return Status(dt.status().code(),
                  where + ": " + dt.status().message() + " for tensor " + in_quotes(name));
  e.dtype = *dt;

  const json& shape = v["shape"];
  if (!shape.is_array()) return invalid_argument(at + "'shape' must be an array, got " + shape.type_name());
  if (shape.size() > size_t(Dims::kMaxDims))
    return unimplemented(at + "has " + std::to_string(shape.size()) + " dimensions; at most " +
                         std::to_string(Dims::kMaxDims) + " are supported");
  uint64_t numel = 1;
  bool overflow = false;
  for (const json& d : shape) {
    std::optional<int64_t> n = as_index(d);
    if (!n) return invalid_argument(at + "'shape' must hold non-negative integers, got " + shape.dump());
    e.shape.push_back(*n);
    overflow |= __builtin_mul_overflow(numel, uint64_t(*n), &numel);
  }
  if (std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end()) numel = 0, overflow = false;

  const json& offsets = v["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    return invalid_argument(at + "'data_offsets' must be an array [begin, end], got " + offsets.dump());
  std::optional<int64_t> begin = as_index(offsets[0]), end = as_index(offsets[1]);
  if (!begin || !end)
    return invalid_argument(at + "'data_offsets' must hold non-negative integers, got " + offsets.dump());
  e.begin = uint64_t(*begin);
  e.end = uint64_t(*end);
  if (e.begin > e.end) return invalid_argument(at + "data_offsets " + offsets.dump() + " begin after end");
  if (e.end > data_bytes)
    return data_loss(at + "data_offsets " + offsets.dump() + " end past the data section (" +
                     std::to_string(data_bytes) + " bytes): truncated file?");
  uint64_t expected = 0;
  overflow |= __builtin_mul_overflow(numel, uint64_t(dtype_size(e.dtype)), &expected);
  if (overflow || expected != e.end - e.begin)
    return invalid_argument(
        at + "shape " + e.shape.to_string() + " " + std::string(dtype_name(e.dtype)) + " needs " +
        (overflow ? std::string("more than 2^64") : std::to_string(expected)) + " bytes, data_offsets " +
        offsets.dump() + " hold " + std::to_string(e.end - e.begin));
  return e;
}

Result<std::map<std::string, std::string>> parse_metadata(const json& v, const std::string& where) {
  if (!v.is_object())
    return invalid_argument(where + ": '__metadata__' must be an object, got " + v.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string())
      return invalid_argument(where + ": '__metadata__' value of " + in_quotes(key) +
                              " must be a string, got " + value.type_name());
    out[key] = value.get<std::string>();
  }
  return out;
}

// NOTE: empty ranges overlap nothing; other ranges, sorted by begin, must not start before
// the previous one ends. Gaps are allowed (HF's writer leaves none, but nothing breaks).
Status check_no_overlap(const std::map<std::string, Entry>& entries, const std::string& where) {
  std::vector<std::pair<const std::string*, const Entry*>> ranges;
  for (const auto& [name, e] : entries)
    if (e.end > e.begin) ranges.push_back({&name, &e});
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Entry& prev = *ranges[i - 1].second;
    const Entry& cur = *ranges[i].second;
    if (cur.begin < prev.end)
      return invalid_argument(where + ": tensors " + in_quotes(*ranges[i - 1].first) + " [" +
                              std::to_string(prev.begin) + ", " + std::to_string(prev.end) + ") and " +
                              in_quotes(*ranges[i].first) + " [" + std::to_string(cur.begin) + ", " +
                              std::to_string(cur.end) + ") overlap");
  }
  return Status();
}


bool is_float(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f16 || d == DType::f8_e4m3;
}

// Contiguous float conversion for weights at load: a tight loop per pair (Tensor::to goes
// element by element through double, too slow for gigabytes of weights).
void convert_floats(const void* src, DType from, void* dst, DType to, int64_t n) {
  auto load = [&](int64_t i) -> float {
    switch (from) {
      case DType::f32: {
        float f;
        std::memcpy(&f, static_cast<const char*>(src) + 4 * i, 4);
        return f;
      }
      case DType::bf16: {
        bf16 b;
        std::memcpy(&b, static_cast<const char*>(src) + 2 * i, 2);
        return bf16_to_f32(b);
      }
      case DType::f16: {
        f16 h;
        std::memcpy(&h, static_cast<const char*>(src) + 2 * i, 2);
        return f16_to_f32(h);
      }
      default:
        return f8_e4m3_to_f32(f8_e4m3{static_cast<const uint8_t*>(src)[i]});
    }
  };
  switch (to) {
    case DType::f32: {
      float* out = static_cast<float*>(dst);
      if (from == DType::bf16) {  // the common case: widen by a shift
        const uint16_t* in = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) {
          const uint32_t u = uint32_t(in[i]) << 16;
          std::memcpy(out + i, &u, 4);
        }
      } else {
        for (int64_t i = 0; i < n; ++i) out[i] = load(i);
      }
      return;
    }
    case DType::bf16: {
      bf16* out = static_cast<bf16*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(load(i));
      return;
    }
    case DType::f16: {
      f16* out = static_cast<f16*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(load(i));
      return;
    }
    default:
      PRISM_CHECK_MSG(false, "convert_floats: unsupported target");
  }
}

// Heap memory even inside a forward pass's ArenaScope: weights outlive any arena reset.
Tensor heap_empty(const Dims& shape, DType dtype) {
  std::shared_ptr<void> mem =
      allocate_aligned(std::max<size_t>(1, size_t(shape.numel()) * dtype_size(dtype)));
  void* p = mem.get();
  return Tensor::from_blob(p, shape, dtype, std::move(mem));
}

}  // namespace

// ---- dtypes ----

Result<DType> parse_safetensors_dtype(const std::string& name) {
  if (name == "F32") return DType::f32;
  if (name == "BF16") return DType::bf16;
  if (name == "F16") return DType::f16;
  if (name == "I8") return DType::i8;
  if (name == "U8") return DType::u8;
  if (name == "I32") return DType::i32;
  if (name == "I64") return DType::i64;
  if (name == "F8_E4M3") return DType::f8_e4m3;
  if (is_known_unsupported_dtype(name)) return unimplemented("unsupported dtype " + in_quotes(name));
  return invalid_argument("unknown dtype " + in_quotes(name));
}

std::string safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i8:
      return "I8";
    case DType::u8:
      return "U8";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::f8_e4m3:
      return "F8_E4M3";
  }
  return "?";
}

// ---- SafetensorsFile ----

struct SafetensorsFile::Impl {
  std::string path;
  std::shared_ptr<MappedFile> mapping;  // shared with every zero-copy Tensor
  const char* data = nullptr;        // start of the data section, inside the mapping
  std::map<std::string, Entry> entries;
  std::vector<std::string> names;  // by begin offset
  std::map<std::string, std::string> metadata;
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::~SafetensorsFile() = default;

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  PRISM_ASSIGN_OR_RETURN(impl->mapping, map_file(path));
  const uint64_t file_bytes = impl->mapping->size;
  const char* base = static_cast<const char*>(impl->mapping->addr);
  const std::string where = "safetensors " + in_quotes(path);

  if (file_bytes < 8)
    return data_loss(where + ": " + std::to_string(file_bytes) +
                     " bytes, shorter than the 8-byte header length: truncated file?");
  uint64_t header_bytes;
  std::memcpy(&header_bytes, base, 8);
  if (header_bytes > kMaxHeaderBytes)
    return invalid_argument(where + ": header length " + std::to_string(header_bytes) + " exceeds the " +
                            std::to_string(kMaxHeaderBytes) + "-byte limit: not a safetensors file?");
  if (header_bytes > file_bytes - 8)
    return data_loss(where + ": header length " + std::to_string(header_bytes) +
                     " points past the end of the " + std::to_string(file_bytes) +
                     "-byte file: truncated file?");

  PRISM_ASSIGN_OR_RETURN(ParsedJson parsed,
                         parse_json(std::string(base + 8, header_bytes), where + " header"));
  if (parsed.duplicate_key)
    return invalid_argument(where + ": header names " + in_quotes(parsed.duplicate) + " twice");
  const json& header = parsed.value;
  if (!header.is_object())
    return invalid_argument(where + ": header must be a JSON object, got " + header.type_name());

  const uint64_t data_bytes = file_bytes - 8 - header_bytes;
  impl->data = base + 8 + header_bytes;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      PRISM_ASSIGN_OR_RETURN(impl->metadata, parse_metadata(value, where));
      continue;
    }
    PRISM_ASSIGN_OR_RETURN(Entry e, parse_entry(name, value, data_bytes, where));
    impl->entries.emplace(name, e);
  }
  PRISM_RETURN_IF_ERROR(check_no_overlap(impl->entries, where));

  for (const auto& [name, e] : impl->entries) impl->names.push_back(name);
  std::stable_sort(impl->names.begin(), impl->names.end(), [&](const std::string& a, const std::string& b) {
    return impl->entries.at(a).begin < impl->entries.at(b).begin;
  });
  return std::shared_ptr<const SafetensorsFile>(new SafetensorsFile(std::move(impl)));
}

const std::vector<std::string>& SafetensorsFile::names() const { return impl_->names; }
bool SafetensorsFile::contains(const std::string& name) const { return impl_->entries.count(name) != 0; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->metadata; }
const std::string& SafetensorsFile::path() const { return impl_->path; }

// NOTE: the view aliases the mapping, which is read-only: writing through it faults. When the
// bytes are not aligned to the element size (offsets are arbitrary in the format; HF's writer
// keeps them aligned), the tensor is a copy instead, since ops may load elements directly.
Result<Tensor> SafetensorsFile::get(const std::string& name) const {
  auto it = impl_->entries.find(name);
  if (it == impl_->entries.end())
    return not_found("tensor " + in_quotes(name) + " not in safetensors " + in_quotes(impl_->path));
  const Entry& e = it->second;
  const char* p = impl_->data + e.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e.dtype) != 0) {
    Tensor t = heap_empty(e.shape, e.dtype);
    std::memcpy(t.raw_data(), p, e.end - e.begin);
    return t;
  }
  return Tensor::from_blob(const_cast<char*>(p), e.shape, e.dtype, std::shared_ptr<void>(impl_->mapping));
}

// ---- WeightSource ----

namespace {

Status open_single(const std::string& path,
                   std::map<std::string, std::shared_ptr<const SafetensorsFile>>& by_name) {
  PRISM_ASSIGN_OR_RETURN(auto file, SafetensorsFile::open(path));
  for (const std::string& name : file->names()) by_name[name] = file;
  return Status();
}

Status open_index(const std::string& index_path,
                  std::map<std::string, std::shared_ptr<const SafetensorsFile>>& by_name) {
  const std::string where = "index " + in_quotes(index_path);
  std::string text;
  {
    std::FILE* f = std::fopen(index_path.c_str(), "rb");
    if (!f) return not_found("cannot open " + where + ": " + errno_text());
    char buf[65536];
    while (size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
    const bool failed = std::ferror(f);
    std::fclose(f);
    if (failed) return data_loss("cannot read " + where);
  }
  PRISM_ASSIGN_OR_RETURN(ParsedJson parsed, parse_json(text, where));
  if (!parsed.value.is_object())
    return invalid_argument(where + ": must be a JSON object, got " + parsed.value.type_name());
  if (!parsed.value.contains("weight_map")) return invalid_argument(where + ": missing 'weight_map'");
  const json& map = parsed.value["weight_map"];
  if (!map.is_object())
    return invalid_argument(where + ": 'weight_map' must be an object, got " + map.type_name());
  if (parsed.duplicate_key)
    return invalid_argument(where + ": names " + in_quotes(parsed.duplicate) + " twice");

  const fs::path dir = fs::path(index_path).parent_path();
  std::map<std::string, std::shared_ptr<const SafetensorsFile>> shards;  // each opened once
  for (const auto& [name, value] : map.items()) {
    if (!value.is_string())
      return invalid_argument(where + ": shard of tensor " + in_quotes(name) + " must be a file name, got " +
                              value.type_name());
    const std::string shard = value.get<std::string>();
    const fs::path rel(shard);
    if (shard.empty() || rel.is_absolute() ||
        std::any_of(rel.begin(), rel.end(), [](const fs::path& c) { return c == ".."; }))
      return invalid_argument(where + ": shard " + in_quotes(shard) + " of tensor " + in_quotes(name) +
                              " must be a file name inside the model directory");
    auto it = shards.find(shard);
    if (it == shards.end()) {
      const std::string shard_path = (dir / rel).string();
      Result<std::shared_ptr<const SafetensorsFile>> file = SafetensorsFile::open(shard_path);
      if (!file) {
        Status s = file.status();
        return Status(s.code(), "shard " + in_quotes(shard) + " listed in " + where + ": " + s.message());
      }
      it = shards.emplace(shard, *file).first;
    }
    if (!it->second->contains(name))
      return data_loss(where + " puts tensor " + in_quotes(name) + " in shard " +
                       in_quotes(it->second->path()) + ", which does not contain it");
    by_name[name] = it->second;
  }
  return Status();
}

}  // namespace

Result<WeightSource> WeightSource::open(const std::string& dir_or_file) {
  WeightSource src;
  std::error_code ec;
  const fs::path p(dir_or_file);
  if (fs::is_directory(p, ec)) {
    // Transformers' names, then diffusers' (a pipeline's component folders); the single file
    // before its shard index when both exist, as both libraries prefer.
    for (const char* stem : {"model", "diffusion_pytorch_model"}) {
      const fs::path single = p / (std::string(stem) + ".safetensors");
      const fs::path index = p / (std::string(stem) + ".safetensors.index.json");
      if (fs::exists(single, ec)) {
        PRISM_RETURN_IF_ERROR(open_single(single.string(), src.by_name_));
        return src;
      }
      if (fs::exists(index, ec)) {
        PRISM_RETURN_IF_ERROR(open_index(index.string(), src.by_name_));
        return src;
      }
    }
    return not_found("no weights in " + in_quotes(dir_or_file) +
                     ": looked for model.safetensors, model.safetensors.index.json, "
                     "diffusion_pytorch_model.safetensors and diffusion_pytorch_model.safetensors.index.json");
  }
  if (!fs::exists(p, ec))
    return not_found("no weights at " + in_quotes(dir_or_file) + ": no such file or directory");
  if (p.extension() == ".json") {
    PRISM_RETURN_IF_ERROR(open_index(p.string(), src.by_name_));
    return src;
  }
  if (is_zip_file(p.string())) {
    PRISM_ASSIGN_OR_RETURN(src.checkpoint_, PytorchCheckpoint::open(p.string()));
    return src;
  }
  PRISM_RETURN_IF_ERROR(open_single(p.string(), src.by_name_));
  return src;
}

bool WeightSource::contains(const std::string& name) const {
  return checkpoint_ ? checkpoint_->contains(name) : by_name_.count(name) != 0;
}

std::vector<std::string> WeightSource::names() const {
  std::vector<std::string> out;
  if (checkpoint_) {
    out = checkpoint_->names();
    std::sort(out.begin(), out.end());
    return out;
  }
  out.reserve(by_name_.size());
  for (const auto& [name, file] : by_name_) out.push_back(name);
  return out;  // std::map: already sorted
}

Result<Tensor> WeightSource::get(const std::string& name) const {
  if (checkpoint_) return checkpoint_->get(name);
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return not_found("tensor " + in_quotes(name) + " not in the checkpoint");
  return it->second->get(name);
}

Result<Tensor> WeightSource::get(const std::string& name, const Dims& shape, DType dtype) const {
  PRISM_ASSIGN_OR_RETURN(Tensor t, get(name));
  const std::string& path = checkpoint_ ? checkpoint_->path() : by_name_.at(name)->path();
  if (!(t.shape() == shape))
    return invalid_argument("tensor " + in_quotes(name) + " in " + in_quotes(path) + ": expected shape " +
                            shape.to_string() + ", got " + t.shape().to_string());
  if (t.dtype() == dtype) return t;
  if (!is_float(t.dtype()) || !is_float(dtype) || dtype == DType::f8_e4m3)
    return invalid_argument("tensor " + in_quotes(name) + " in " + in_quotes(path) + ": stored as " +
                            std::string(dtype_name(t.dtype())) + ", cannot convert to " +
                            std::string(dtype_name(dtype)));
  Tensor out = heap_empty(shape, dtype);
  convert_floats(t.raw_data(), t.dtype(), out.raw_data(), dtype, t.numel());
  return out;
}

// ---- writer ----

namespace {

Status write_all(std::FILE* f, const void* p, size_t n, const std::string& path) {
  if (n && std::fwrite(p, 1, n, f) != n)
    return data_loss("cannot write " + in_quotes(path) + ": " + errno_text());
  return Status();
}

// A JSON string literal; invalid UTF-8 is an error (nlohmann's dump would throw).
Result<std::string> json_string(const std::string& s, const std::string& what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    return invalid_argument(what + " " + in_quotes(s) + " is not valid UTF-8");
  }
}

}  // namespace

// NOTE: offsets follow the given order with no padding between tensors (HF's reader rejects
// gaps), so a tensor after one whose size is not a multiple of its element size is misaligned
// and will be read back as a copy; callers wanting zero-copy order by element size.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      PRISM_ASSIGN_OR_RETURN(std::string k, json_string(key, "metadata key"));
      PRISM_ASSIGN_OR_RETURN(std::string v, json_string(value, "metadata value"));
      header += (first ? "" : ",") + k + ":" + v;
      first = false;
    }
    header += "}";
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto refuse = [&](const char* why) {
      return invalid_argument("cannot write " + in_quotes(path) + ": tensor " + in_quotes(name) + why);
    };
    if (name == "__metadata__") return refuse(": the name is reserved");
    if (!seen.insert(name).second) return refuse(" given twice");
    if (!t.defined()) return refuse(" is undefined");
    if (t.device() != Device::cpu) return refuse(" is not on the CPU");
    PRISM_ASSIGN_OR_RETURN(std::string k, json_string(name, "tensor name"));
    std::string shape = "[";
    for (int i = 0; i < t.dim(); ++i) {
      if (i) shape += ',';
      shape += std::to_string(t.size(i));
    }
    shape += "]";
    if (header.size() > 1) header += ',';
    header += k + ":{\"dtype\":\"" + safetensors_dtype_name(t.dtype()) + "\",\"shape\":" + shape +
              ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + t.nbytes()) +
              "]}";
    offset += t.nbytes();
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section starts 8-aligned

  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return not_found("cannot create " + in_quotes(tmp) + ": " + errno_text());
  Status s;
  const uint64_t len = header.size();
  s = write_all(f, &len, 8, tmp);
  if (s.ok()) s = write_all(f, header.data(), header.size(), tmp);
  for (size_t i = 0; s.ok() && i < tensors.size(); ++i) {
    const Tensor t = tensors[i].second.contiguous();
    s = write_all(f, t.raw_data(), t.nbytes(), tmp);
  }
  if (std::fclose(f) != 0 && s.ok()) s = data_loss("cannot write " + in_quotes(tmp) + ": " + errno_text());
  if (s.ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
    s = data_loss("cannot rename " + in_quotes(tmp) + " to " + in_quotes(path) + ": " + errno_text());
  if (!s.ok()) std::remove(tmp.c_str());
  return s;
}

}  // namespace prism::formats
