// ONNX weights: the file's protobuf messages are read here, field by field, from the wire
// format (varint keys; varint, fixed 32/64-bit and length-delimited values), and every graph
// (the main one and each If / Loop / Scan body, however deep) is walked for its initializers
// and its Constant nodes. Nothing here interprets the graph's computation, and must not: a
// model family reads the tensors it knows by name.
// NOTE (why not libonnx's generated classes): they need libprotobuf 3.21, and Debian's
// libsentencepiece (text/) exports the protobuf-lite 3.14 it bundles; one process cannot load
// both — whichever comes first in the link order, the other aborts at start-up ("compiled
// against version 3.14.0 ... not compatible with 3.21.12", or a crash in protobuf's static
// init). The few ONNX messages read here are a small, stable part of onnx.proto.
#include "formats/onnx.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <vector>

#include "base/file.h"

namespace prism::formats {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data and fixed-width fields are little-endian");

namespace {

namespace fs = std::filesystem;

// NOTE: Prism reads small ONNX models (Silero VAD is 2.3 MB); a file this large is not one,
// and reading it whole into memory must not be what a typo in a config costs.
constexpr uint64_t kMaxOnnxBytes = 1ull << 30;
// Subgraphs nest a handful of levels in real exports (Silero: 5); this keeps our recursion
// bounded on a hostile file.
constexpr int kMaxGraphDepth = 64;

// ---- the protobuf wire format ----------------------------------------------------------

enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

struct WireField {
  uint32_t number = 0;
  uint8_t type = 0;
  uint64_t value = 0;      // kVarint, kFixed64, kFixed32
  std::string_view bytes;  // kBytes: a string, a sub-message or a packed repeated field
};

bool read_varint(std::string_view& s, uint64_t& v) {
  v = 0;
  for (int i = 0; i < 10 && !s.empty(); ++i) {
    const uint8_t b = uint8_t(s.front());
    s.remove_prefix(1);
    v |= uint64_t(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) return true;
  }
  return false;  // truncated, or longer than a 64-bit varint can be
}

// The fields of one message in order. next() is false at the end, and on malformed bytes
// (groups, which ONNX does not use, included), after which failed() is true.
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : s_(bytes) {}

  bool next(WireField& f) {
    if (s_.empty() || failed_) return false;
    uint64_t key = 0;
    if (!read_varint(s_, key) || (key >> 3) == 0 || (key >> 3) > 0x1fffffff) return fail();
    f.number = uint32_t(key >> 3);
    f.type = uint8_t(key & 7);
    f.bytes = {};
    switch (f.type) {
      case kVarint:
        if (!read_varint(s_, f.value)) return fail();
        return true;
      case kFixed64:
        if (s_.size() < 8) return fail();
        std::memcpy(&f.value, s_.data(), 8);
        s_.remove_prefix(8);
        return true;
      case kFixed32: {
        if (s_.size() < 4) return fail();
        uint32_t v;
        std::memcpy(&v, s_.data(), 4);
        f.value = v;
        s_.remove_prefix(4);
        return true;
      }
      case kBytes: {
        uint64_t n = 0;
        if (!read_varint(s_, n) || n > s_.size()) return fail();
        f.bytes = s_.substr(0, size_t(n));
        s_.remove_prefix(size_t(n));
        return true;
      }
      default:
        return fail();
    }
  }
  bool failed() const { return failed_; }

 private:
  bool fail() {
    failed_ = true;
    return false;
  }
  std::string_view s_;
  bool failed_ = false;
};

// A repeated int64 / float field arrives packed (one kBytes field) or one value per field;
// readers must accept both. Each calls fn per value; false for malformed bytes.
template <class Fn>
bool for_each_int64(const WireField& f, Fn&& fn) {
  if (f.type == kVarint) return fn(int64_t(f.value)), true;
  if (f.type != kBytes) return false;
  std::string_view s = f.bytes;
  for (uint64_t v = 0; !s.empty();) {
    if (!read_varint(s, v)) return false;
    fn(int64_t(v));
  }
  return true;
}

template <class Fn>
bool for_each_float(const WireField& f, Fn&& fn) {
  if (f.type == kFixed32) return fn(std::bit_cast<float>(uint32_t(f.value))), true;
  if (f.type != kBytes || f.bytes.size() % 4 != 0) return false;
  for (size_t i = 0; i < f.bytes.size(); i += 4) {
    float v;
    std::memcpy(&v, f.bytes.data() + i, 4);
    fn(v);
  }
  return true;
}

// ---- the ONNX messages (field numbers of onnx.proto) -------------------------------------

namespace model_field {
constexpr uint32_t ir_version = 1, producer_name = 2, graph = 7, opset_import = 8;
}
namespace opset_field {
constexpr uint32_t domain = 1, version = 2;
}
namespace graph_field {
constexpr uint32_t node = 1, initializer = 5;
}
namespace node_field {
constexpr uint32_t output = 2, op_type = 4, attribute = 5, domain = 7;
}
namespace attribute_field {
constexpr uint32_t name = 1, f = 2, i = 3, t = 5, g = 6, floats = 7, ints = 8, graphs = 11;
}
namespace tensor_field {
constexpr uint32_t dims = 1, data_type = 2, float_data = 4, int64_data = 7, name = 8, raw_data = 9, data_location = 14;
}
constexpr int64_t kTensorFloat = 1, kTensorInt64 = 7;  // TensorProto.DataType
constexpr int64_t kLocationExternal = 1;                // TensorProto.DataLocation

class WeightCollector {
 public:
  WeightCollector(const std::string& path, OnnxWeights& out) : path_(path), out_(out) {}

  Status graph(std::string_view bytes, int depth) {
    if (depth > kMaxGraphDepth)
      return corrupt("subgraphs nest deeper than " + std::to_string(kMaxGraphDepth) + " levels");
    WireReader r(bytes);
    for (WireField f; r.next(f);) {
      if (f.type != kBytes) continue;
      if (f.number == graph_field::initializer) PRISM_RETURN_IF_ERROR(tensor(f.bytes, ""));
      if (f.number == graph_field::node) PRISM_RETURN_IF_ERROR(node(f.bytes, depth));
    }
    return r.failed() ? corrupt("a graph's bytes are malformed") : Status();
  }

 private:
  Status node(std::string_view bytes, int depth) {
    std::string_view op_type, domain;
    std::vector<std::string_view> outputs, attributes;
    WireReader r(bytes);
    for (WireField f; r.next(f);) {
      if (f.type != kBytes) continue;
      if (f.number == node_field::op_type) op_type = f.bytes;
      if (f.number == node_field::domain) domain = f.bytes;
      if (f.number == node_field::output) outputs.push_back(f.bytes);
      if (f.number == node_field::attribute) attributes.push_back(f.bytes);
    }
    if (r.failed()) return corrupt("a node's bytes are malformed");
    const bool constant = op_type == "Constant" && (domain.empty() || domain == "ai.onnx") && outputs.size() == 1;
    for (std::string_view a : attributes) PRISM_RETURN_IF_ERROR(attribute(a, constant ? outputs[0] : std::string_view(), depth));
    return Status();
  }

  // Subgraphs (g, graphs) of any node are walked; a Constant's value is one of its
  // attributes: a tensor, or (opset 12+) a float / int or a list of them. Sparse and string
  // constants are skipped like other dtypes.
  Status attribute(std::string_view bytes, std::string_view constant_output, int depth) {
    std::string_view name;
    std::vector<WireField> fields;
    WireReader r(bytes);
    for (WireField f; r.next(f);) {
      if (f.number == attribute_field::name && f.type == kBytes) name = f.bytes;
      fields.push_back(f);
    }
    if (r.failed()) return corrupt("an attribute's bytes are malformed");
    for (const WireField& f : fields) {
      if ((f.number == attribute_field::g || f.number == attribute_field::graphs) && f.type == kBytes)
        PRISM_RETURN_IF_ERROR(graph(f.bytes, depth + 1));
    }
    if (constant_output.empty()) return Status();
    const std::string out(constant_output);
    std::vector<float> floats;
    std::vector<int64_t> ints;
    for (const WireField& f : fields) {
      bool ok = true;
      if (name == "value" && f.number == attribute_field::t && f.type == kBytes) return tensor(f.bytes, out);
      if (name == "value_float" && f.number == attribute_field::f && f.type == kFixed32)
        return add(out, Tensor::from<float>({std::bit_cast<float>(uint32_t(f.value))}, Dims{}));
      if (name == "value_int" && f.number == attribute_field::i && f.type == kVarint)
        return add(out, Tensor::from<int64_t>({int64_t(f.value)}, Dims{}));
      if (name == "value_floats" && f.number == attribute_field::floats)
        ok = for_each_float(f, [&](float v) { floats.push_back(v); });
      if (name == "value_ints" && f.number == attribute_field::ints)
        ok = for_each_int64(f, [&](int64_t v) { ints.push_back(v); });
      if (!ok) return corrupt("Constant '" + out + "' has malformed values");
    }
    if (name == "value_floats") return add(out, Tensor::from<float>(floats, Dims{int64_t(floats.size())}));
    if (name == "value_ints") return add(out, Tensor::from<int64_t>(ints, Dims{int64_t(ints.size())}));
    return Status();
  }

  // A TensorProto; `name` overrides its own (a Constant's tensor is named by the node output).
  Status tensor(std::string_view bytes, const std::string& name_override) {
    // Pass 1: what the tensor is and how many values it holds, before allocating any.
    std::string name;
    int64_t data_type = 0, location = 0, num_floats = 0, num_ints = 0;
    Dims shape;
    bool bad_dims = false, malformed = false;
    std::string_view raw;
    bool has_raw = false;
    WireReader r(bytes);
    for (WireField f; r.next(f);) {
      switch (f.number) {
        case tensor_field::name: name = std::string(f.bytes); break;
        case tensor_field::data_type: data_type = int64_t(f.value); break;
        case tensor_field::data_location: location = int64_t(f.value); break;
        case tensor_field::raw_data: raw = f.bytes, has_raw = f.type == kBytes; break;
        case tensor_field::dims:
          malformed |= !for_each_int64(f, [&](int64_t d) {
            if (shape.size() == Dims::kMaxDims) bad_dims = true;
            else shape.push_back(d);
          });
          break;
        case tensor_field::float_data: malformed |= !for_each_float(f, [&](float) { ++num_floats; }); break;
        case tensor_field::int64_data: malformed |= !for_each_int64(f, [&](int64_t) { ++num_ints; }); break;
        default: break;
      }
    }
    if (!name_override.empty()) name = name_override;
    if (r.failed() || malformed) return corrupt("tensor '" + name + "' has malformed bytes");
    if (data_type != kTensorFloat && data_type != kTensorInt64) return Status();  // not weights Prism reads
    if (location == kLocationExternal)
      return invalid_argument("ONNX file " + path_ + ": tensor '" + name +
                              "' keeps its data in an external file, which Prism does not read");
    if (bad_dims) return corrupt("tensor '" + name + "' has more than " + std::to_string(Dims::kMaxDims) + " dimensions");
    int64_t numel = 1;
    for (const int64_t d : shape) {
      // Bounded by the file size: no tensor of a valid file holds more values than bytes.
      if (d < 0 || (d > 0 && numel > int64_t(kMaxOnnxBytes) / d)) return corrupt("tensor '" + name + "' has an invalid shape");
      numel *= d;
    }
    const DType dtype = data_type == kTensorFloat ? DType::f32 : DType::i64;
    const int64_t stored = has_raw ? int64_t(raw.size() / dtype_size(dtype)) : dtype == DType::f32 ? num_floats : num_ints;
    if (stored != numel || (has_raw && raw.size() % dtype_size(dtype) != 0))
      return corrupt("tensor '" + name + "' holds " + std::to_string(stored) + " values for shape " + shape.to_string());

    // Pass 2: the values.
    Tensor out = Tensor::empty(shape, dtype);
    if (has_raw) {
      if (numel > 0) std::memcpy(out.raw_data(), raw.data(), out.nbytes());
    } else {
      int64_t n = 0;
      WireReader values(bytes);
      for (WireField f; values.next(f);) {
        if (dtype == DType::f32 && f.number == tensor_field::float_data)
          for_each_float(f, [&](float v) { out.data<float>()[n++] = v; });
        if (dtype == DType::i64 && f.number == tensor_field::int64_data)
          for_each_int64(f, [&](int64_t v) { out.data<int64_t>()[n++] = v; });
      }
    }
    return add(name, std::move(out));
  }

  Status add(const std::string& name, Tensor t) {
    // ONNX names are single-assignment across a model, subgraphs included.
    if (!out_.tensors.emplace(name, std::move(t)).second) return corrupt("tensor '" + name + "' is defined twice");
    return Status();
  }

  Status corrupt(const std::string& what) { return invalid_argument("ONNX file " + path_ + " is corrupt: " + what); }

  const std::string& path_;
  OnnxWeights& out_;
};

}  // namespace

Result<OnnxWeights> read_onnx_weights(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) return not_found("ONNX file " + path + " does not exist");
  if (!fs::is_regular_file(st)) return invalid_argument(path + " is not an ONNX model: not a regular file");
  const uint64_t size = fs::file_size(path, ec);
  if (ec) return not_found("ONNX file " + path + " cannot be read: " + ec.message());
  if (size > kMaxOnnxBytes)
    return invalid_argument("ONNX file " + path + " is " + std::to_string(size) +
                            " bytes, more than the limit of 1 GiB for ONNX weights");
  PRISM_ASSIGN_OR_RETURN(const std::string bytes, read_file(path));

  // ModelProto: the graph and what describes the file.
  OnnxWeights out;
  std::string_view graph;
  bool has_graph = false;
  WireReader r(bytes);
  for (WireField f; r.next(f);) {
    if (f.number == model_field::ir_version && f.type == kVarint) out.ir_version = int64_t(f.value);
    if (f.number == model_field::producer_name && f.type == kBytes) out.producer = std::string(f.bytes);
    if (f.number == model_field::graph && f.type == kBytes) graph = f.bytes, has_graph = true;
    if (f.number == model_field::opset_import && f.type == kBytes) {
      std::string_view domain;
      int64_t version = 0;
      WireReader op(f.bytes);
      for (WireField g; op.next(g);) {
        if (g.number == opset_field::domain && g.type == kBytes) domain = g.bytes;
        if (g.number == opset_field::version && g.type == kVarint) version = int64_t(g.value);
      }
      if (domain.empty() || domain == "ai.onnx") out.opset = version;
    }
  }
  if (r.failed()) return invalid_argument(path + " is not an ONNX model: its bytes are not a protobuf message");
  if (!has_graph) return invalid_argument(path + " is not an ONNX model: it has no graph");
  WeightCollector collect(path, out);
  PRISM_RETURN_IF_ERROR(collect.graph(graph, 0));
  return out;
}

}  // namespace prism::formats
