// Tensor: a typed, strided view of memory that someone owns. Views (slice, transpose, view)
// share the owner and never copy. Memory comes from the thread's current Arena when one is
// active (activations in a forward pass), from the heap otherwise, or from outside (mmap'd
// weights) through from_blob. A Tensor never synchronises: who may touch it is the caller's
// business.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "base/check.h"
#include "runtime/dtype.h"

namespace prism {

enum class Device : uint8_t { cpu, cuda };

// A fixed-capacity list of dimensions (or strides): no allocation, so Tensors are cheap.
class Dims {
 public:
  static constexpr int kMaxDims = 6;
  Dims() = default;
  Dims(std::initializer_list<int64_t> dims);
  explicit Dims(std::span<const int64_t> dims);
  int size() const { return n_; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t& operator[](int i) { return d_[i]; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  void push_back(int64_t v) { PRISM_CHECK(n_ < kMaxDims); d_[n_++] = v; }
  int64_t numel() const;
  bool operator==(const Dims& o) const;
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: an absent optional weight

  // Uninitialised, 64-byte aligned, contiguous. From the current Arena if one is active.
  static Tensor empty(const Dims& shape, DType dtype);
  static Tensor zeros(const Dims& shape, DType dtype);
  // Wraps memory owned by `owner` (null: the caller keeps it alive). Contiguous.
  static Tensor from_blob(void* data, const Dims& shape, DType dtype,
                          std::shared_ptr<void> owner = nullptr, Device device = Device::cpu);
  // Copies values into a new tensor: Tensor::from<float>({1, 2, 3}, {3}).
  template <class T>
  static Tensor from(std::span<const T> values, const Dims& shape);
  template <class T>
  static Tensor from(std::initializer_list<T> values, const Dims& shape) {
    return from(std::span<const T>(values.begin(), values.size()), shape);
  }

  bool defined() const { return defined_; }
  const Dims& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }  // in elements
  int dim() const { return shape_.size(); }
  int64_t size(int d) const { return shape_[wrap(d)]; }
  int64_t stride(int d) const { return strides_[wrap(d)]; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;

  void* raw_data() const { return data_; }
  template <class T>
  T* data() const {
    PRISM_CHECK_MSG(dtype_ == dtype_of<T>(), "Tensor::data<T>() with the wrong element type");
    return static_cast<T*>(data_);
  }
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Views: share memory, never copy. view() needs a contiguous tensor; one dim may be -1.
  Tensor view(const Dims& shape) const;
  Tensor slice(int dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor select(int dim, int64_t index) const;              // drops dim
  Tensor transpose(int d0, int d1) const;
  Tensor permute(std::initializer_list<int> order) const;
  Tensor unsqueeze(int dim) const;

  // Copies.
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;  // converts between f32/bf16/f16/i8/u8/i32/i64 (f8 reads only)
  void copy_from(const Tensor& src);  // same shape; converts dtype; handles strides

  std::string to_string() const;  // "Tensor[2, 3] f32"

 private:
  int wrap(int d) const { return d < 0 ? d + shape_.size() : d; }

  void* data_ = nullptr;
  std::shared_ptr<void> owner_;  // keeps data_ alive; null for arena or borrowed memory
  Dims shape_, strides_;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu;
  bool defined_ = false;  // made by a factory, not default-constructed
};

Dims contiguous_strides(const Dims& shape);

template <class T>
Tensor Tensor::from(std::span<const T> values, const Dims& shape) {
  PRISM_CHECK(int64_t(values.size()) == shape.numel());
  Tensor t = Tensor::empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

}  // namespace prism
