// torch.save archives: a zip reader (central directory, zip64, stored and deflated entries)
// and a restricted unpickler, both over bytes they never trust. The archive is read whole
// at open, tensors included, so every error surfaces there with the file's name.
//
// NOTE: nothing read from the file is used as a size, an offset or an index before it is
// checked against the bytes that exist; every loop is bounded by the input's length; objects
// of the pickle live in one flat vector and refer to each other by index, so a cyclic or
// deeply nested pickle can neither leak nor overflow the stack when it is freed. A tensor
// may not read more elements than its storage holds, so no allocation exceeds the file's
// (inflated) size.
#include "formats/pytorch_checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <unordered_map>

#include "formats/mapped_file.h"
#include "runtime/arena.h"

namespace prism::formats {

static_assert(std::endian::native == std::endian::little, "storages are read as little-endian");

namespace {

std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

// ---- bytes ---------------------------------------------------------------------------------

using Bytes = std::span<const uint8_t>;

uint16_t rd16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
uint32_t rd32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t rd64(const uint8_t* p) { return uint64_t(rd32(p)) | uint64_t(rd32(p + 4)) << 32; }

// [offset, offset + length) lies inside a buffer of `size` bytes (no overflow).
bool in_bounds(uint64_t offset, uint64_t length, uint64_t size) { return offset <= size && length <= size - offset; }



// Heap memory even inside an ArenaScope: weights outlive any arena reset.
Tensor heap_empty(const Dims& shape, DType dtype) {
  std::shared_ptr<void> mem = allocate_aligned(std::max<size_t>(1, size_t(shape.numel()) * dtype_size(dtype)));
  void* p = mem.get();
  return Tensor::from_blob(p, shape, dtype, std::move(mem));
}

// ---- zip -----------------------------------------------------------------------------------

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50;
constexpr uint32_t kEnd64Sig = 0x06064b50, kEnd64LocatorSig = 0x07064b50;
constexpr size_t kEndBytes = 22, kCentralBytes = 46, kLocalBytes = 30;
constexpr uint16_t kStored = 0, kDeflated = 8;
// Deflate cannot expand more than ~1032:1; a larger claimed size is a lie (a zip bomb).
constexpr uint64_t kMaxDeflateRatio = 1032;

struct ZipEntry {
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0, size = 0;
  uint64_t data_offset = 0;  // of the entry's (compressed) bytes in the file
};

// The zip64 extended-information extra field (id 1) replaces the 32-bit fields that read
// 0xffffffff, in the order size, compressed size, local header offset.
Status apply_zip64_extra(Bytes extra, uint64_t& size, uint64_t& compressed, uint64_t& local_offset) {
  size_t pos = 0;
  while (pos + 4 <= extra.size()) {
    const uint16_t id = rd16(&extra[pos]), len = rd16(&extra[pos + 2]);
    pos += 4;
    if (len > extra.size() - pos) return data_loss("an extra field runs past its entry");
    if (id == 1) {
      size_t at = pos;
      for (uint64_t* field : {&size, &compressed, &local_offset}) {
        if (*field != 0xffffffffu) continue;
        if (at + 8 > pos + len) return data_loss("a zip64 extra field is shorter than its entry needs");
        *field = rd64(&extra[at]);
        at += 8;
      }
    }
    pos += len;
  }
  return Status();
}

struct Directory {
  uint64_t offset = 0, size = 0, count = 0;
};

// The end-of-central-directory record (and its zip64 form when a field overflowed).
Result<Directory> find_directory(Bytes file) {
  if (file.size() < kEndBytes) return invalid_argument("not a zip archive (too short)");
  const size_t last = file.size() - kEndBytes;
  const size_t first = last > 0xffff ? last - 0xffff : 0;  // the comment is at most 64 KiB
  size_t end = SIZE_MAX;
  for (size_t pos = last + 1; pos-- > first;) {
    if (rd32(&file[pos]) == kEndSig && pos + kEndBytes + rd16(&file[pos + 20]) <= file.size()) {
      end = pos;
      break;
    }
  }
  if (end == SIZE_MAX) return invalid_argument("not a zip archive (no end of central directory)");
  const uint8_t* e = &file[end];
  if (rd16(e + 4) != 0 || rd16(e + 6) != 0) return unimplemented("multi-disk zip archives are not supported");
  Directory d{rd32(e + 16), rd32(e + 12), rd16(e + 10)};
  if (d.count == 0xffff || d.size == 0xffffffffu || d.offset == 0xffffffffu) {
    if (end < 20 || rd32(&file[end - 20]) != kEnd64LocatorSig)
      return data_loss("a zip64 archive without its zip64 end-of-directory locator");
    const uint64_t at = rd64(&file[end - 20 + 8]);
    if (!in_bounds(at, 56, file.size()) || rd32(&file[at]) != kEnd64Sig)
      return data_loss("the zip64 end-of-directory record is missing or out of the file");
    d.count = rd64(&file[at + 32]);
    d.size = rd64(&file[at + 40]);
    d.offset = rd64(&file[at + 48]);
  }
  if (!in_bounds(d.offset, d.size, file.size())) return data_loss("the zip central directory lies outside the file");
  if (d.count > d.size / kCentralBytes) return data_loss("the zip central directory is shorter than its entry count");
  return d;
}

Result<std::map<std::string, ZipEntry>> read_zip(Bytes file) {
  PRISM_ASSIGN_OR_RETURN(Directory dir, find_directory(file));
  std::map<std::string, ZipEntry> entries;
  uint64_t pos = dir.offset;
  const uint64_t dir_end = dir.offset + dir.size;
  for (uint64_t i = 0; i < dir.count; ++i) {
    if (!in_bounds(pos, kCentralBytes, dir_end) || rd32(&file[pos]) != kCentralSig)
      return data_loss("zip central directory entry " + std::to_string(i) + " is malformed");
    const uint8_t* c = &file[pos];
    const uint16_t flags = rd16(c + 8), name_len = rd16(c + 28), extra_len = rd16(c + 30), comment_len = rd16(c + 32);
    const uint64_t record = kCentralBytes + uint64_t(name_len) + extra_len + comment_len;
    if (!in_bounds(pos, record, dir_end))
      return data_loss("zip central directory entry " + std::to_string(i) + " runs past the directory");
    const std::string name(reinterpret_cast<const char*>(c + kCentralBytes), name_len);
    ZipEntry e;
    e.method = rd16(c + 10);
    e.crc = rd32(c + 16);
    e.compressed = rd32(c + 20);
    e.size = rd32(c + 24);
    uint64_t local = rd32(c + 42);
    Status s = apply_zip64_extra(file.subspan(pos + kCentralBytes + name_len, extra_len), e.size, e.compressed, local);
    if (!s.ok()) return data_loss("zip entry " + in_quotes(name) + ": " + s.message());
    pos += record;

    const std::string at = "zip entry " + in_quotes(name) + ": ";
    if (flags & 1) return unimplemented(at + "is encrypted");
    if (e.method != kStored && e.method != kDeflated)
      return unimplemented(at + "compression method " + std::to_string(e.method) +
                           " (only stored and deflate are supported)");
    if (e.method == kStored && e.compressed != e.size) return data_loss(at + "stored, but its two sizes differ");
    if (!in_bounds(local, kLocalBytes, file.size()) || rd32(&file[local]) != kLocalSig)
      return data_loss(at + "its local header is missing or out of the file");
    const uint64_t local_name = rd16(&file[local + 26]), local_extra = rd16(&file[local + 28]);
    e.data_offset = local + kLocalBytes + local_name + local_extra;
    if (local_name != name_len || std::memcmp(&file[local + kLocalBytes], name.data(), name_len) != 0)
      return data_loss(at + "its local header names another file");
    if (!in_bounds(e.data_offset, e.compressed, file.size()))
      return data_loss(at + "its data runs past the end of the file: truncated?");
    if (!entries.emplace(name, e).second) return data_loss("the zip archive holds " + in_quotes(name) + " twice");
  }
  return entries;
}

// What reading may allocate beyond the file itself: inflated entries and copies of strided
// tensors. NOTE: without it a small hostile file could ask for gigabytes (a deflate bomb; a
// thousand transposed views of one large storage, each copied). Legitimate files stay far
// below: weights deflate by a few times at most and are rarely strided.
struct Budget {
  uint64_t left;
  explicit Budget(uint64_t file_bytes) : left(64 * file_bytes + (uint64_t(64) << 20)) {}
  Status take(uint64_t n, const std::string& what) {
    if (n > left)
      return resource_exhausted(what + " would take the memory read beyond the file past 64x the file's size");
    left -= n;
    return Status();
  }
};

// An entry's bytes: a view of the file when stored, an inflated copy when deflated; the CRC-32
// checked either way.
struct EntryBytes {
  Bytes bytes;
  std::shared_ptr<void> owner;  // what keeps `bytes` alive
};

Result<EntryBytes> read_entry(Bytes file, const std::shared_ptr<void>& file_owner, const std::string& name,
                              const ZipEntry& e, Budget& budget) {
  const std::string at = "zip entry " + in_quotes(name) + ": ";
  EntryBytes out;
  if (e.method == kStored) {
    out.bytes = file.subspan(e.data_offset, e.size);
    out.owner = file_owner;
  } else {
    if (e.size / kMaxDeflateRatio > e.compressed + 1)
      return data_loss(at + "claims " + std::to_string(e.size) + " bytes inflated from " +
                       std::to_string(e.compressed) + ", more than deflate can encode");
    PRISM_RETURN_IF_ERROR(budget.take(e.size, at + "inflating it"));
    out.owner = allocate_aligned(std::max<uint64_t>(1, e.size));
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return internal_error(at + "cannot start zlib");
    z.next_in = const_cast<Bytef*>(&file[e.data_offset]);
    uint64_t in_left = e.compressed, out_left = e.size;
    z.next_out = static_cast<Bytef*>(out.owner.get());
    int rc = Z_OK;
    // zlib counts in 32-bit units: feed both sides in chunks.
    while (rc == Z_OK) {
      const uInt in_chunk = uInt(std::min<uint64_t>(in_left, 1u << 30)),
                 out_chunk = uInt(std::min<uint64_t>(out_left, 1u << 30));
      z.avail_in = in_chunk;
      z.avail_out = out_chunk;
      rc = inflate(&z, Z_NO_FLUSH);
      in_left -= in_chunk - z.avail_in;
      out_left -= out_chunk - z.avail_out;
      if (rc == Z_OK && z.avail_in == in_chunk && z.avail_out == out_chunk) rc = Z_BUF_ERROR;  // no progress
    }
    inflateEnd(&z);
    if (rc != Z_STREAM_END || out_left != 0)
      return data_loss(at + "its deflate stream is corrupt or does not inflate to " + std::to_string(e.size) +
                       " bytes");
    out.bytes = Bytes(static_cast<const uint8_t*>(out.owner.get()), e.size);
  }
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t done = 0; done < out.bytes.size();) {  // crc32 takes 32-bit lengths
    const uInt n = uInt(std::min<size_t>(out.bytes.size() - done, 1u << 30));
    crc = crc32(crc, out.bytes.data() + done, n);
    done += n;
  }
  if (uint32_t(crc) != e.crc) return data_loss(at + "CRC-32 mismatch: corrupt file");
  return out;
}

// ---- pickle objects ------------------------------------------------------------------------

// What an allowlisted global stands for.
enum class Global : uint8_t {
  ordered_dict,       // collections.OrderedDict
  rebuild_tensor_v2,  // torch._utils._rebuild_tensor_v2
  rebuild_tensor,     // torch._utils._rebuild_tensor (older files)
  rebuild_parameter,  // torch._utils._rebuild_parameter (an nn.Parameter saved as itself)
  storage_type,       // torch.<X>Storage: only ever the type field of a persistent id
};

struct StorageType {
  const char* name;
  bool supported;
  DType dtype;
  int element_bytes;
};

// The typed storage classes torch.save names. Unsupported ones are allowlisted too, so a
// float64 checkpoint is reported as unsupported rather than as hostile.
constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", true, DType::f32, 4},         {"HalfStorage", true, DType::f16, 2},
    {"BFloat16Storage", true, DType::bf16, 2},     {"CharStorage", true, DType::i8, 1},
    {"ByteStorage", true, DType::u8, 1},           {"IntStorage", true, DType::i32, 4},
    {"LongStorage", true, DType::i64, 8},          {"BoolStorage", true, DType::u8, 1},
    {"DoubleStorage", false, DType::f32, 8},       {"ShortStorage", false, DType::f32, 2},
    {"ComplexFloatStorage", false, DType::f32, 8}, {"ComplexDoubleStorage", false, DType::f32, 16},
    {"QInt8Storage", false, DType::f32, 1},        {"QUInt8Storage", false, DType::f32, 1},
    {"QInt32Storage", false, DType::f32, 4},
};

enum class Kind : uint8_t { none, boolean, integer, floating, text, bytes, tuple, list, dict, global, storage, tensor };

const char* kind_name(Kind k) {
  static const char* const kNames[] = {"None",  "bool", "int",  "float",  "str",     "bytes",
                                       "tuple", "list", "dict", "global", "storage", "tensor"};
  return kNames[int(k)];
}

// NOTE: kept small (~80 bytes): a pickle makes up to one per opcode byte or two, and the
// objects of a whole pickle are alive at once. Storages and tensors live in side tables.
struct Object {
  Kind kind = Kind::none;
  Global global = Global::ordered_dict;
  int ref = 0;          // storage_type global: kStorageTypes index; storage, tensor: side-table index
  int64_t integer = 0;  // integer, boolean
  double floating = 0;
  std::string text;        // text, bytes; a global's "module.name"
  std::vector<int> items;  // tuple, list: elements; dict: key, value, key, value, ...
};

struct Storage {
  std::string key;
  int type = 0;  // kStorageTypes index
  Bytes data;
  std::shared_ptr<void> owner;  // keeps data alive
};

// A pickle may make at most this many objects (~2.5 GiB of them): bounds memory whatever the
// file says. torch.save makes about 15 per tensor.
constexpr size_t kMaxObjects = size_t(1) << 25;

// Opcodes this reader implements (pickle protocols 2 to 5, binary forms only).
namespace op {
constexpr uint8_t MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', NONE = 'N', BININT = 'J', BININT1 = 'K',
                  BININT2 = 'M', BINFLOAT = 'G', BINUNICODE = 'X', BINSTRING = 'T', SHORT_BINSTRING = 'U',
                  BINBYTES = 'B', SHORT_BINBYTES = 'C', EMPTY_TUPLE = ')', TUPLE = 't', EMPTY_LIST = ']', APPEND = 'a',
                  APPENDS = 'e', LIST = 'l', EMPTY_DICT = '}', DICT = 'd', SETITEM = 's', SETITEMS = 'u', GLOBAL = 'c',
                  REDUCE = 'R', BUILD = 'b', BINPERSID = 'Q', BINPUT = 'q', LONG_BINPUT = 'r', BINGET = 'h',
                  LONG_BINGET = 'j', PROTO = 0x80, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87, NEWTRUE = 0x88,
                  NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b, SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d,
                  BINBYTES8 = 0x8e, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95;
}  // namespace op

// Opcodes a weight file never needs, named in the refusal.
const char* refused_opcode_name(uint8_t c) {
  switch (c) {
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 0x82:
    case 0x83:
    case 0x84: return "EXT";
    case 'P': return "PERSID";
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'V': return "UNICODE";
    case 'p': return "PUT";
    case 'g': return "GET";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x96: return "BYTEARRAY8";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return nullptr;
  }
}

std::string hex(uint8_t c) {
  static const char* const kDigits = "0123456789abcdef";
  return std::string("0x") + kDigits[c >> 4] + kDigits[c & 15];
}

// ---- the unpickler -------------------------------------------------------------------------

// Storages of the archive, read on first use by key.
struct StorageSource {
  Budget* budget = nullptr;
  Bytes file;
  std::shared_ptr<void> file_owner;
  const std::map<std::string, ZipEntry>* entries = nullptr;
  std::string prefix;  // "<archive>/"
};

class Unpickler {
 public:
  Unpickler(Bytes pickle, const StorageSource& storages) : in_(pickle), storages_(storages) {}

  // The root object's index.
  Result<int> run();
  const Object& at(int i) const { return objects_[size_t(i)]; }
  const Tensor& tensor(const Object& o) const { return tensors_[size_t(o.ref)]; }

 private:
  Status fail(const std::string& what) const {
    return invalid_argument("data.pkl at byte " + std::to_string(op_pos_) + ": " + what);
  }
  // Objects are only made by step() and what it calls, which check room() first.
  int make(Object o) {
    objects_.push_back(std::move(o));
    return int(objects_.size() - 1);
  }
  int make(Kind k) {
    Object o;
    o.kind = k;
    return make(std::move(o));
  }
  int make_tensor(Tensor t) {
    tensors_.push_back(std::move(t));
    Object o;
    o.kind = Kind::tensor;
    o.ref = int(tensors_.size() - 1);
    return make(std::move(o));
  }
  Result<Bytes> take(uint64_t n) {
    if (n > in_.size() - pos_)
      return data_loss("data.pkl is truncated: an opcode at byte " + std::to_string(op_pos_) + " needs " +
                       std::to_string(n) + " more bytes");
    Bytes b = in_.subspan(pos_, n);
    pos_ += n;
    return b;
  }
  Result<uint64_t> take_uint(int bytes) {
    PRISM_ASSIGN_OR_RETURN(Bytes b, take(uint64_t(bytes)));
    uint64_t v = 0;
    for (int i = bytes; i-- > 0;) v = v << 8 | b[size_t(i)];
    return v;
  }
  Result<std::string> take_line() {  // GLOBAL's "module\n" and "name\n"
    const size_t limit = std::min<size_t>(in_.size(), pos_ + 256);
    for (size_t i = pos_; i < limit; ++i)
      if (in_[i] == '\n') {
        std::string s(reinterpret_cast<const char*>(&in_[pos_]), i - pos_);
        pos_ = i + 1;
        return s;
      }
    if (limit == in_.size())
      return data_loss("data.pkl is truncated inside a GLOBAL at byte " + std::to_string(op_pos_));
    return fail("GLOBAL without a newline-terminated name");
  }
  Result<int> pop() {
    if (stack_.size() <= mark_floor()) return fail("pop from an empty stack");
    const int v = stack_.back();
    stack_.pop_back();
    return v;
  }
  size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  Result<std::vector<int>> pop_mark() {
    if (marks_.empty()) return fail("no MARK to pop to");
    std::vector<int> items(stack_.begin() + std::ptrdiff_t(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  Result<int> top() const {
    if (stack_.size() <= mark_floor()) return fail("an empty stack");
    return stack_.back();
  }
  Status push_text(Kind kind, uint64_t n) {
    PRISM_ASSIGN_OR_RETURN(Bytes b, take(n));
    Object o;
    o.kind = kind;
    o.text.assign(reinterpret_cast<const char*>(b.data()), b.size());
    stack_.push_back(make(std::move(o)));
    return Status();
  }
  void push_int(int64_t v, Kind kind = Kind::integer) {
    Object o;
    o.kind = kind;
    o.integer = v;
    stack_.push_back(make(std::move(o)));
  }
  Status memo_put(uint64_t key) {
    if (stack_.empty()) return fail("memoize with an empty stack");
    memo_[key] = stack_.back();
    return Status();
  }
  Status memo_get(uint64_t key) {
    auto it = memo_.find(key);
    if (it == memo_.end()) return fail("memo key " + std::to_string(key) + " was never stored");
    stack_.push_back(it->second);
    return Status();
  }
  Status push_long(uint64_t n);
  Status add_items(int target, const std::vector<int>& items, Kind want);
  Status push_global(const std::string& module, const std::string& name);
  Status reduce();
  Status build();
  Status persistent_load();
  Result<int> rebuild_tensor(const std::vector<int>& args);
  Result<std::vector<int64_t>> int_tuple(int i, const char* what) const;
  Status step(uint8_t c, bool& stop);

  Bytes in_;
  const StorageSource& storages_;
  size_t pos_ = 0, op_pos_ = 0;
  std::vector<Object> objects_;
  std::vector<Storage> storages_table_;
  std::vector<Tensor> tensors_;
  std::vector<int> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<uint64_t, int> memo_;
  std::map<std::string, int> storage_by_key_;
};

Status Unpickler::push_long(uint64_t n) {
  if (n > 8) return fail("an integer wider than 64 bits");
  PRISM_ASSIGN_OR_RETURN(Bytes b, take(n));
  uint64_t v = 0;
  for (size_t i = n; i-- > 0;) v = v << 8 | b[i];
  if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
  push_int(int64_t(v));
  return Status();
}

Status Unpickler::add_items(int target, const std::vector<int>& items, Kind want) {
  Object& t = objects_[size_t(target)];
  if (t.kind != want)
    return fail(std::string(want == Kind::list ? "APPEND" : "SETITEM") + " on a " + kind_name(t.kind));
  if (want == Kind::dict && items.size() % 2 != 0) return fail("SETITEMS with an odd number of items");
  t.items.insert(t.items.end(), items.begin(), items.end());
  return Status();
}

Status Unpickler::push_global(const std::string& module, const std::string& name) {
  Object o;
  o.kind = Kind::global;
  o.text = module + "." + name;
  if (module == "collections" && name == "OrderedDict") {
    o.global = Global::ordered_dict;
  } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
    o.global = Global::rebuild_tensor_v2;
  } else if (module == "torch._utils" && name == "_rebuild_tensor") {
    o.global = Global::rebuild_tensor;
  } else if (module == "torch._utils" && name == "_rebuild_parameter") {
    o.global = Global::rebuild_parameter;
  } else {
    const StorageType* end = std::end(kStorageTypes);
    const StorageType* it = module != "torch" ? end
                                              : std::find_if(std::begin(kStorageTypes), end,
                                                             [&](const StorageType& s) { return name == s.name; });
    if (it == end) return fail("pickle global " + in_quotes(o.text) + " is not allowed in a weight file");
    o.global = Global::storage_type;
    o.ref = int(it - std::begin(kStorageTypes));
  }
  stack_.push_back(make(std::move(o)));
  return Status();
}

Result<std::vector<int64_t>> Unpickler::int_tuple(int i, const char* what) const {
  const Object& o = at(i);
  if (o.kind != Kind::tuple) return fail(std::string("tensor ") + what + " must be a tuple, got " + kind_name(o.kind));
  std::vector<int64_t> v;
  for (int item : o.items) {
    if (at(item).kind != Kind::integer) return fail(std::string("tensor ") + what + " must hold ints");
    v.push_back(at(item).integer);
  }
  return v;
}

// _rebuild_tensor(_v2)(storage, storage_offset, size, stride, ...): the strided view of the
// storage as a contiguous prism Tensor (a zero-copy view when the layout allows).
Result<int> Unpickler::rebuild_tensor(const std::vector<int>& args) {
  if (at(args[0]).kind != Kind::storage)
    return fail("a tensor's storage is a " + std::string(kind_name(at(args[0]).kind)));
  const Storage& storage = storages_table_[size_t(at(args[0]).ref)];
  if (at(args[1]).kind != Kind::integer || at(args[1]).integer < 0)
    return fail("a tensor's storage offset must be a non-negative int");
  const int64_t offset = at(args[1]).integer;
  PRISM_ASSIGN_OR_RETURN(std::vector<int64_t> size, int_tuple(args[2], "size"));
  PRISM_ASSIGN_OR_RETURN(std::vector<int64_t> stride, int_tuple(args[3], "stride"));
  if (size.size() != stride.size()) return fail("a tensor's size and stride differ in length");
  if (size.size() > size_t(Dims::kMaxDims))
    return unimplemented("a tensor with " + std::to_string(size.size()) + " dimensions (at most " +
                         std::to_string(Dims::kMaxDims) + " are supported)");
  const StorageType& type = kStorageTypes[storage.type];
  const uint64_t esize = uint64_t(type.element_bytes);
  const uint64_t storage_numel = storage.data.size() / esize;

  // NOTE: the highest element read is offset + sum((size - 1) * stride); every term is
  // checked, and a tensor may hold no more elements than its storage (no expanded views),
  // which bounds the copy below by the storage's size.
  uint64_t numel = 1, last = uint64_t(offset);
  bool empty = false;
  for (size_t d = 0; d < size.size(); ++d) {
    if (size[d] < 0 || stride[d] < 0) return fail("a tensor with a negative size or stride");
    empty |= size[d] == 0;
  }
  Dims shape(std::span<const int64_t>(size.data(), size.size()));
  if (empty) return make_tensor(heap_empty(shape, type.dtype));
  for (size_t d = 0; d < size.size(); ++d) {
    uint64_t span = 0;
    if (__builtin_mul_overflow(uint64_t(size[d]), numel, &numel) ||
        __builtin_mul_overflow(uint64_t(size[d] - 1), uint64_t(stride[d]), &span) ||
        __builtin_add_overflow(last, span, &last))
      return fail("a tensor's size and strides overflow");
  }
  if (last >= storage_numel)
    return data_loss("a tensor reads element " + std::to_string(last) + " of storage " + in_quotes(storage.key) +
                     ", which holds " + std::to_string(storage_numel));
  if (numel > storage_numel)
    return unimplemented("a tensor of " + std::to_string(numel) + " elements over a storage of " +
                         std::to_string(storage_numel) + " (an expanded view) is not supported");

  const uint8_t* base = storage.data.data() + uint64_t(offset) * esize;
  const Dims dense = contiguous_strides(shape);
  bool contiguous = true;
  for (size_t d = 0; d < size.size(); ++d) contiguous &= size[d] == 1 || stride[d] == dense[int(d)];
  if (contiguous && reinterpret_cast<uintptr_t>(base) % esize == 0)
    return make_tensor(Tensor::from_blob(const_cast<uint8_t*>(base), shape, type.dtype, storage.owner));
  // A strided gather, element by element: such tensors are rare in weight files.
  PRISM_RETURN_IF_ERROR(storages_.budget->take(numel * esize, "a copy of a strided tensor"));
  Tensor t = heap_empty(shape, type.dtype);
  uint8_t* dst = static_cast<uint8_t*>(t.raw_data());
  std::vector<int64_t> index(size.size(), 0);
  for (uint64_t i = 0; i < numel; ++i) {
    uint64_t src = 0;
    for (size_t d = 0; d < size.size(); ++d) src += uint64_t(index[d]) * uint64_t(stride[d]);
    std::memcpy(dst + i * esize, base + src * esize, esize);
    for (size_t d = size.size(); d-- > 0;) {
      if (++index[d] < size[d]) break;
      index[d] = 0;
    }
  }
  return make_tensor(std::move(t));
}

Status Unpickler::reduce() {
  PRISM_ASSIGN_OR_RETURN(int args_i, pop());
  PRISM_ASSIGN_OR_RETURN(int callable_i, pop());
  const Object& callable = at(callable_i);
  if (callable.kind != Kind::global) return fail("REDUCE of a " + std::string(kind_name(callable.kind)));
  if (at(args_i).kind != Kind::tuple)
    return fail("REDUCE of " + in_quotes(callable.text) + " with arguments that are not a tuple");
  const std::vector<int> args = at(args_i).items;
  const size_t n = args.size();
  switch (callable.global) {
    case Global::ordered_dict:
      if (n != 0) return fail("collections.OrderedDict called with arguments");
      stack_.push_back(make(Kind::dict));
      return Status();
    case Global::rebuild_tensor_v2:  // (storage, offset, size, stride, requires_grad, hooks[, metadata])
    case Global::rebuild_tensor: {   // (storage, offset, size, stride)
      const bool v2 = callable.global == Global::rebuild_tensor_v2;
      if (v2 ? (n != 6 && n != 7) : n != 4)
        return fail(in_quotes(callable.text) + " with " + std::to_string(n) + " arguments");
      PRISM_ASSIGN_OR_RETURN(int t, rebuild_tensor(args));
      stack_.push_back(t);
      return Status();
    }
    case Global::rebuild_parameter:  // (data, requires_grad, backward_hooks)
      if (n != 3 || at(args[0]).kind != Kind::tensor) return fail("torch._utils._rebuild_parameter without a tensor");
      stack_.push_back(args[0]);
      return Status();
    case Global::storage_type: break;
  }
  return fail("calling " + in_quotes("torch." + std::string(kStorageTypes[callable.ref].name)) +
              " is not allowed in a weight file");
}

// BUILD sets an object's state. The only one a state dict carries is its `_metadata` (module
// versions), on the OrderedDict itself: accepted and dropped. Anything else is refused.
Status Unpickler::build() {
  PRISM_ASSIGN_OR_RETURN(int state, pop());
  PRISM_ASSIGN_OR_RETURN(int target, top());
  if (at(target).kind != Kind::dict || (at(state).kind != Kind::dict && at(state).kind != Kind::none))
    return fail("BUILD of a " + std::string(kind_name(at(target).kind)) + " with a " + kind_name(at(state).kind) +
                " state is not allowed in a weight file");
  return Status();
}

// BINPERSID: torch.save's persistent id ('storage', <storage type>, key, location, numel)
// names the record <archive>/data/<key>.
Status Unpickler::persistent_load() {
  PRISM_ASSIGN_OR_RETURN(int pid_i, pop());
  const Object& pid = at(pid_i);
  if (pid.kind != Kind::tuple || pid.items.size() != 5 || at(pid.items[0]).kind != Kind::text ||
      at(pid.items[0]).text != "storage")
    return fail("a persistent id that is not ('storage', type, key, location, numel)");
  const Object& type = at(pid.items[1]);
  const Object& key = at(pid.items[2]);
  const Object& numel = at(pid.items[4]);
  if (type.kind != Kind::global || type.global != Global::storage_type || key.kind != Kind::text ||
      numel.kind != Kind::integer || numel.integer < 0)
    return fail("a malformed storage persistent id");
  const StorageType& st = kStorageTypes[type.ref];
  if (!st.supported)
    return unimplemented("storage type " + in_quotes(std::string("torch.") + st.name) + " is not supported");

  const std::string key_text = key.text;  // `key` dangles once make() grows objects_
  auto known = storage_by_key_.find(key_text);
  if (known != storage_by_key_.end()) {
    if (storages_table_[size_t(at(known->second).ref)].type != type.ref)
      return fail("storage " + in_quotes(key_text) + " named with two types");
    stack_.push_back(known->second);
    return Status();
  }
  const std::string record = storages_.prefix + "data/" + key_text;
  auto entry = storages_.entries->find(record);
  if (entry == storages_.entries->end()) return data_loss("storage record " + in_quotes(record) + " is missing");
  PRISM_ASSIGN_OR_RETURN(EntryBytes bytes,
                         read_entry(storages_.file, storages_.file_owner, record, entry->second, *storages_.budget));
  uint64_t need = 0;
  if (__builtin_mul_overflow(uint64_t(numel.integer), uint64_t(st.element_bytes), &need) || need > bytes.bytes.size())
    return data_loss("storage " + in_quotes(key_text) + " of " + std::to_string(numel.integer) +
                     " elements needs more than its " + std::to_string(bytes.bytes.size()) + "-byte record");
  storages_table_.push_back(Storage{key_text, type.ref, bytes.bytes.first(need), bytes.owner});
  Object o;
  o.kind = Kind::storage;
  o.ref = int(storages_table_.size() - 1);
  const int i = make(std::move(o));
  storage_by_key_.emplace(key_text, i);
  stack_.push_back(i);
  return Status();
}

Status Unpickler::step(uint8_t c, bool& stop) {
  switch (c) {
    case op::PROTO: {
      PRISM_ASSIGN_OR_RETURN(uint64_t v, take_uint(1));
      if (v > 5) return fail("pickle protocol " + std::to_string(v) + " is not supported");
      return Status();
    }
    case op::FRAME:  // protocol 4 framing is a read-ahead hint only
      return take(8).status();
    case op::STOP: stop = true; return Status();
    case op::MARK: marks_.push_back(stack_.size()); return Status();
    case op::POP: return pop().status();
    case op::POP_MARK: return pop_mark().status();
    case op::DUP: {
      PRISM_ASSIGN_OR_RETURN(int t, top());
      stack_.push_back(t);
      return Status();
    }
    case op::NONE: stack_.push_back(make(Kind::none)); return Status();
    case op::NEWTRUE:
    case op::NEWFALSE: push_int(c == op::NEWTRUE, Kind::boolean); return Status();
    case op::BININT: {
      PRISM_ASSIGN_OR_RETURN(uint64_t v, take_uint(4));
      push_int(int32_t(uint32_t(v)));
      return Status();
    }
    case op::BININT1:
    case op::BININT2: {
      PRISM_ASSIGN_OR_RETURN(uint64_t v, take_uint(c == op::BININT1 ? 1 : 2));
      push_int(int64_t(v));
      return Status();
    }
    case op::LONG1:
    case op::LONG4: {
      PRISM_ASSIGN_OR_RETURN(uint64_t n, take_uint(c == op::LONG1 ? 1 : 4));
      return push_long(n);
    }
    case op::BINFLOAT: {
      PRISM_ASSIGN_OR_RETURN(Bytes b, take(8));
      uint64_t bits = 0;
      for (uint8_t byte : b) bits = bits << 8 | byte;  // big-endian
      Object o;
      o.kind = Kind::floating;
      std::memcpy(&o.floating, &bits, 8);
      stack_.push_back(make(std::move(o)));
      return Status();
    }
    case op::SHORT_BINUNICODE:
    case op::BINUNICODE:
    case op::BINUNICODE8:
    case op::SHORT_BINSTRING:
    case op::BINSTRING: {
      const int width = c == op::SHORT_BINUNICODE || c == op::SHORT_BINSTRING ? 1 : c == op::BINUNICODE8 ? 8 : 4;
      PRISM_ASSIGN_OR_RETURN(uint64_t n, take_uint(width));
      return push_text(Kind::text, n);
    }
    case op::SHORT_BINBYTES:
    case op::BINBYTES:
    case op::BINBYTES8: {
      PRISM_ASSIGN_OR_RETURN(uint64_t n, take_uint(c == op::SHORT_BINBYTES ? 1 : c == op::BINBYTES ? 4 : 8));
      return push_text(Kind::bytes, n);
    }
    case op::EMPTY_TUPLE:
    case op::EMPTY_LIST:
    case op::EMPTY_DICT:
      stack_.push_back(make(c == op::EMPTY_TUPLE ? Kind::tuple : c == op::EMPTY_LIST ? Kind::list : Kind::dict));
      return Status();
    case op::TUPLE1:
    case op::TUPLE2:
    case op::TUPLE3: {
      std::vector<int> items(size_t(c - op::TUPLE1 + 1));
      for (size_t i = items.size(); i-- > 0;) {
        PRISM_ASSIGN_OR_RETURN(items[i], pop());
      }
      Object o;
      o.kind = Kind::tuple;
      o.items = std::move(items);
      stack_.push_back(make(std::move(o)));
      return Status();
    }
    case op::TUPLE:
    case op::LIST:
    case op::DICT: {
      PRISM_ASSIGN_OR_RETURN(std::vector<int> items, pop_mark());
      if (c == op::DICT && items.size() % 2 != 0) return fail("DICT with an odd number of items");
      Object o;
      o.kind = c == op::TUPLE ? Kind::tuple : c == op::LIST ? Kind::list : Kind::dict;
      o.items = std::move(items);
      stack_.push_back(make(std::move(o)));
      return Status();
    }
    case op::APPEND: {
      PRISM_ASSIGN_OR_RETURN(int v, pop());
      PRISM_ASSIGN_OR_RETURN(int list, top());
      return add_items(list, {v}, Kind::list);
    }
    case op::SETITEM: {
      PRISM_ASSIGN_OR_RETURN(int v, pop());
      PRISM_ASSIGN_OR_RETURN(int k, pop());
      PRISM_ASSIGN_OR_RETURN(int dict, top());
      return add_items(dict, {k, v}, Kind::dict);
    }
    case op::APPENDS:
    case op::SETITEMS: {
      PRISM_ASSIGN_OR_RETURN(std::vector<int> items, pop_mark());
      PRISM_ASSIGN_OR_RETURN(int target, top());
      return add_items(target, items, c == op::APPENDS ? Kind::list : Kind::dict);
    }
    case op::GLOBAL: {
      PRISM_ASSIGN_OR_RETURN(std::string module, take_line());
      PRISM_ASSIGN_OR_RETURN(std::string name, take_line());
      return push_global(module, name);
    }
    case op::STACK_GLOBAL: {
      PRISM_ASSIGN_OR_RETURN(int name, pop());
      PRISM_ASSIGN_OR_RETURN(int module, pop());
      if (at(name).kind != Kind::text || at(module).kind != Kind::text) return fail("STACK_GLOBAL of non-strings");
      return push_global(at(module).text, at(name).text);
    }
    case op::REDUCE: return reduce();
    case op::BUILD: return build();
    case op::BINPERSID: return persistent_load();
    case op::BINPUT:
    case op::LONG_BINPUT: {
      PRISM_ASSIGN_OR_RETURN(uint64_t key, take_uint(c == op::BINPUT ? 1 : 4));
      return memo_put(key);
    }
    case op::MEMOIZE: return memo_put(memo_.size());
    case op::BINGET:
    case op::LONG_BINGET: {
      PRISM_ASSIGN_OR_RETURN(uint64_t key, take_uint(c == op::BINGET ? 1 : 4));
      return memo_get(key);
    }
    default: break;
  }
  if (const char* name = refused_opcode_name(c))
    return fail(std::string("pickle opcode ") + name + " (" + hex(c) + ") is not allowed in a weight file");
  return fail("unknown pickle opcode " + hex(c));
}

Result<int> Unpickler::run() {
  bool stop = false;
  while (!stop) {
    if (pos_ >= in_.size()) return data_loss("data.pkl ends without STOP: truncated?");
    op_pos_ = pos_;
    if (objects_.size() >= kMaxObjects)
      return resource_exhausted("data.pkl makes more than " + std::to_string(kMaxObjects) + " objects");
    PRISM_RETURN_IF_ERROR(step(in_[pos_++], stop));
  }
  return pop();
}

// ---- flattening ----------------------------------------------------------------------------

constexpr int kMaxDepth = 64;

struct Flattener {
  const Unpickler& u;
  std::vector<std::string> names;
  std::map<std::string, Tensor> tensors;
  std::set<int> visited;  // containers: each walked once (cycles, shared sub-dicts)

  Status walk(int i, const std::string& name, int depth) {
    const Object& o = u.at(i);
    if (o.kind == Kind::tensor) {
      if (!tensors.emplace(name, u.tensor(o)).second)
        return invalid_argument("the checkpoint names tensor " + in_quotes(name) + " twice");
      names.push_back(name);
      return Status();
    }
    if (o.kind != Kind::dict && o.kind != Kind::list && o.kind != Kind::tuple) return Status();  // not a weight
    if (depth > kMaxDepth)
      return invalid_argument("the checkpoint nests containers deeper than " + std::to_string(kMaxDepth));
    if (!visited.insert(i).second) return Status();
    const std::string prefix = name.empty() ? "" : name + ".";
    if (o.kind != Kind::dict) {
      for (size_t k = 0; k < o.items.size(); ++k)
        PRISM_RETURN_IF_ERROR(walk(o.items[k], prefix + std::to_string(k), depth + 1));
      return Status();
    }
    for (size_t k = 0; k + 1 < o.items.size(); k += 2) {
      const Object& key = u.at(o.items[k]);
      std::string part;
      if (key.kind == Kind::text) {
        part = key.text;
      } else if (key.kind == Kind::integer) {
        part = std::to_string(key.integer);
      } else {
        return invalid_argument("a dict key of type " + std::string(kind_name(key.kind)) + " under " + in_quotes(name));
      }
      PRISM_RETURN_IF_ERROR(walk(o.items[k + 1], prefix + part, depth + 1));
    }
    return Status();
  }
};

}  // namespace

// ---- PytorchCheckpoint ---------------------------------------------------------------------

struct PytorchCheckpoint::Impl {
  std::string path;
  std::vector<std::string> names;
  std::map<std::string, Tensor> tensors;
};

PytorchCheckpoint::PytorchCheckpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PytorchCheckpoint::~PytorchCheckpoint() = default;

namespace {

// The archive's name: the folder of its data.pkl ("archive/" from torch.save, or the file's
// stem). The first such record in directory order, as torch's reader takes the first.
Result<std::string> archive_prefix(const std::map<std::string, ZipEntry>& entries) {
  std::string best;
  uint64_t best_offset = UINT64_MAX;
  for (const auto& [name, e] : entries) {
    const size_t slash = name.find('/');
    if (slash == std::string::npos || slash == 0 || name.compare(slash, std::string::npos, "/data.pkl") != 0) continue;
    if (e.data_offset < best_offset) best = name.substr(0, slash + 1), best_offset = e.data_offset;
  }
  if (best_offset == UINT64_MAX)
    return invalid_argument("a zip archive without <archive>/data.pkl: not a torch.save file");
  return best;
}

Result<std::unique_ptr<PytorchCheckpoint::Impl>> read_checkpoint(Bytes file, const std::shared_ptr<void>& owner) {
  if (!file.empty() && file[0] == op::PROTO)
    return unimplemented("a legacy (PyTorch < 1.6) torch.save file: load it in PyTorch and save it again");
  PRISM_ASSIGN_OR_RETURN(auto entries, read_zip(file));
  PRISM_ASSIGN_OR_RETURN(std::string prefix, archive_prefix(entries));
  Budget budget(file.size());
  if (auto it = entries.find(prefix + "byteorder"); it != entries.end()) {
    PRISM_ASSIGN_OR_RETURN(EntryBytes order, read_entry(file, owner, it->first, it->second, budget));
    const std::string value(reinterpret_cast<const char*>(order.bytes.data()), order.bytes.size());
    if (value != "little")
      return unimplemented("a checkpoint saved with byte order " + in_quotes(value) + " (only little)");
  }
  const std::string pkl = prefix + "data.pkl";
  PRISM_ASSIGN_OR_RETURN(EntryBytes pickle, read_entry(file, owner, pkl, entries.at(pkl), budget));
  StorageSource storages{&budget, file, owner, &entries, prefix};
  Unpickler u(pickle.bytes, storages);
  PRISM_ASSIGN_OR_RETURN(int root, u.run());
  Flattener f{u, {}, {}, {}};
  PRISM_RETURN_IF_ERROR(f.walk(root, "", 0));
  auto impl = std::make_unique<PytorchCheckpoint::Impl>();
  impl->names = std::move(f.names);
  impl->tensors = std::move(f.tensors);
  return impl;
}

// Every error names the file.
Result<std::unique_ptr<PytorchCheckpoint::Impl>> with_origin(Result<std::unique_ptr<PytorchCheckpoint::Impl>> impl,
                                                             const std::string& origin) {
  if (!impl)
    return Status(impl.status().code(), "pytorch checkpoint " + in_quotes(origin) + ": " + impl.status().message());
  (*impl)->path = origin;
  return impl;
}

}  // namespace

Result<std::shared_ptr<const PytorchCheckpoint>> PytorchCheckpoint::open(const std::string& path) {
  PRISM_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> mapping, map_file(path));
  const Bytes file(static_cast<const uint8_t*>(mapping->addr), mapping->size);
  PRISM_ASSIGN_OR_RETURN(auto impl, with_origin(read_checkpoint(file, std::shared_ptr<void>(mapping)), path));
  return std::shared_ptr<const PytorchCheckpoint>(new PytorchCheckpoint(std::move(impl)));
}

Result<std::shared_ptr<const PytorchCheckpoint>> PytorchCheckpoint::parse(std::shared_ptr<const std::string> bytes,
                                                                          const std::string& origin) {
  PRISM_CHECK(bytes != nullptr);
  const Bytes file(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  PRISM_ASSIGN_OR_RETURN(auto impl,
                         with_origin(read_checkpoint(file, std::const_pointer_cast<std::string>(bytes)), origin));
  return std::shared_ptr<const PytorchCheckpoint>(new PytorchCheckpoint(std::move(impl)));
}

const std::vector<std::string>& PytorchCheckpoint::names() const { return impl_->names; }
bool PytorchCheckpoint::contains(const std::string& name) const { return impl_->tensors.count(name) != 0; }
const std::string& PytorchCheckpoint::path() const { return impl_->path; }

Result<Tensor> PytorchCheckpoint::get(const std::string& name) const {
  auto it = impl_->tensors.find(name);
  if (it == impl_->tensors.end())
    return not_found("tensor " + in_quotes(name) + " not in pytorch checkpoint " + in_quotes(impl_->path));
  return it->second;
}

bool is_zip_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  unsigned char magic[4] = {};
  const bool read = std::fread(magic, 1, 4, f) == 4;
  std::fclose(f);
  return read && rd32(magic) == kLocalSig;
}

}  // namespace prism::formats
