// Tensor factories, views and copies. Copies are not a hot path: they convert element by
// element through double, except the contiguous same-dtype case (memcpy).
#include "runtime/tensor.h"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <limits>

#include "runtime/arena.h"

namespace prism {

Dims::Dims(std::initializer_list<int64_t> dims) {
  PRISM_CHECK(int(dims.size()) <= kMaxDims);
  for (int64_t d : dims) d_[n_++] = d;
}

Dims::Dims(std::span<const int64_t> dims) {
  PRISM_CHECK(int(dims.size()) <= kMaxDims);
  for (int64_t d : dims) d_[n_++] = d;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i) n *= d_[i];
  return n;
}

bool Dims::operator==(const Dims& o) const {
  return n_ == o.n_ && std::equal(begin(), end(), o.begin());
}

std::string Dims::to_string() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + std::to_string(d_[i]);
  return s + "]";
}

Dims contiguous_strides(const Dims& shape) {
  Dims strides = shape;
  int64_t s = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor Tensor::empty(const Dims& shape, DType dtype) {
  for (int64_t d : shape) PRISM_CHECK_MSG(d >= 0, "negative dimension");
  const size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  if (Arena* arena = current_arena()) return from_blob(arena->allocate(bytes), shape, dtype);
  std::shared_ptr<void> mem = allocate_aligned(bytes);
  void* p = mem.get();
  return from_blob(p, shape, dtype, std::move(mem));
}

Tensor Tensor::zeros(const Dims& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::from_blob(void* data, const Dims& shape, DType dtype,
                         std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.data_ = data;
  t.owner_ = std::move(owner);
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  t.defined_ = true;
  return t;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

Tensor Tensor::view(const Dims& shape) const {
  PRISM_CHECK_MSG(is_contiguous(), "view() of a non-contiguous tensor; call contiguous()");
  Dims s = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      PRISM_CHECK_MSG(infer < 0, "view() with more than one -1");
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    PRISM_CHECK(known > 0 && numel() % known == 0);
    s[infer] = numel() / known;
  }
  PRISM_CHECK_MSG(s.numel() == numel(), "view() changes the number of elements");
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = contiguous_strides(s);
  return t;
}

Tensor Tensor::slice(int d, int64_t start, int64_t end) const {
  d = wrap(d);
  PRISM_CHECK(d >= 0 && d < dim() && 0 <= start && start <= end && end <= shape_[d]);
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + start * strides_[d] * int64_t(dtype_size(dtype_));
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int d, int64_t index) const {
  d = wrap(d);
  PRISM_CHECK(d >= 0 && d < dim() && 0 <= index && index < shape_[d]);
  Tensor t = slice(d, index, index + 1);
  Dims shape, strides;
  for (int i = 0; i < dim(); ++i) {
    if (i == d) continue;
    shape.push_back(shape_[i]);
    strides.push_back(strides_[i]);
  }
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  d0 = wrap(d0);
  d1 = wrap(d1);
  PRISM_CHECK(d0 >= 0 && d0 < dim() && d1 >= 0 && d1 < dim());
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

Tensor Tensor::permute(std::initializer_list<int> order) const {
  PRISM_CHECK(int(order.size()) == dim());
  Tensor t = *this;
  int i = 0;
  unsigned seen = 0;
  for (int src : order) {
    src = wrap(src);
    PRISM_CHECK(src >= 0 && src < dim() && !(seen & (1u << src)));
    seen |= 1u << src;
    t.shape_[i] = shape_[src];
    t.strides_[i] = strides_[src];
    ++i;
  }
  return t;
}

Tensor Tensor::unsqueeze(int d) const {
  if (d < 0) d += dim() + 1;
  PRISM_CHECK(d >= 0 && d <= dim());
  Dims shape, strides;
  for (int i = 0; i <= dim(); ++i) {
    if (i == d) {
      shape.push_back(1);
      strides.push_back(i < dim() ? strides_[i] * shape_[i] : 1);
    }
    if (i < dim()) {
      shape.push_back(shape_[i]);
      strides.push_back(strides_[i]);
    }
  }
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = strides;
  return t;
}

namespace {

double load_as_double(const void* p, DType dt) {
  switch (dt) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::bf16: return bf16_to_f32(*static_cast<const bf16*>(p));
    case DType::f16: return f16_to_f32(*static_cast<const f16*>(p));
    case DType::i8: return *static_cast<const int8_t*>(p);
    case DType::u8: return *static_cast<const uint8_t*>(p);
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i64: return double(*static_cast<const int64_t*>(p));
    case DType::f8_e4m3: return f8_e4m3_to_f32(*static_cast<const f8_e4m3*>(p));
  }
  return 0;
}

template <class T>
T saturate(double v) {
  const double lo = double(std::numeric_limits<T>::min()), hi = double(std::numeric_limits<T>::max());
  return T(std::clamp(std::nearbyint(v), lo, hi));
}

void store_from_double(void* p, DType dt, double v) {
  switch (dt) {
    case DType::f32: *static_cast<float*>(p) = float(v); return;
    case DType::bf16: *static_cast<bf16*>(p) = f32_to_bf16(float(v)); return;
    case DType::f16: *static_cast<f16*>(p) = f32_to_f16(float(v)); return;
    case DType::i8: *static_cast<int8_t*>(p) = saturate<int8_t>(v); return;
    case DType::u8: *static_cast<uint8_t*>(p) = saturate<uint8_t>(v); return;
    case DType::i32: *static_cast<int32_t*>(p) = saturate<int32_t>(v); return;
    case DType::i64: *static_cast<int64_t*>(p) = int64_t(v); return;
    case DType::f8_e4m3: PRISM_CHECK_MSG(false, "writing f8_e4m3 is not supported");
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& src) {
  PRISM_CHECK_MSG(shape_ == src.shape_, "copy_from() between different shapes");
  PRISM_CHECK(device_ == Device::cpu && src.device_ == Device::cpu);
  if (dtype_ == src.dtype_ && is_contiguous() && src.is_contiguous()) {
    std::memcpy(data_, src.data_, nbytes());
    return;
  }
  const int64_t n = numel();
  if (n == 0) return;
  const size_t ds = dtype_size(dtype_), ss = dtype_size(src.dtype_);
  if (dtype_ == src.dtype_ && dim() >= 1 && stride(-1) == 1 && src.stride(-1) == 1) {
    // Rows contiguous on both sides (slices of a fused projection, a transposed batch):
    // one memcpy per row, the outer dims walked by an odometer.
    const int64_t row = shape_[dim() - 1], rows = n / row;
    Dims idx = shape_;
    for (int i = 0; i < dim(); ++i) idx[i] = 0;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t doff = 0, soff = 0;
      for (int i = 0; i + 1 < dim(); ++i) {
        doff += idx[i] * strides_[i];
        soff += idx[i] * src.strides_[i];
      }
      std::memcpy(static_cast<char*>(data_) + doff * int64_t(ds),
                  static_cast<const char*>(src.data_) + soff * int64_t(ss), size_t(row) * ds);
      for (int i = dim() - 2; i >= 0; --i) {
        if (++idx[i] < shape_[i]) break;
        idx[i] = 0;
      }
    }
    return;
  }
  Dims idx = shape_;
  for (int i = 0; i < dim(); ++i) idx[i] = 0;
  for (int64_t e = 0; e < n; ++e) {
    int64_t doff = 0, soff = 0;
    for (int i = 0; i < dim(); ++i) {
      doff += idx[i] * strides_[i];
      soff += idx[i] * src.strides_[i];
    }
    const char* sp = static_cast<const char*>(src.data_) + soff * int64_t(ss);
    char* dp = static_cast<char*>(data_) + doff * int64_t(ds);
    if (dtype_ == src.dtype_) {
      std::memcpy(dp, sp, ds);
    } else {
      store_from_double(dp, dtype_, load_as_double(sp, src.dtype_));
    }
    for (int i = dim() - 1; i >= 0; --i) {  // odometer
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = empty(shape_, dtype);
  t.copy_from(*this);
  return t;
}

std::string Tensor::to_string() const {
  if (!defined_) return "Tensor(undefined)";
  return "Tensor" + shape_.to_string() + " " + std::string(dtype_name(dtype_));
}

}  // namespace prism
