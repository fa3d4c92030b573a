// pytorch_checkpoint: weights written by torch.save (PyTorch >= 1.6), the .pth / .pt /
// pytorch_model.bin files. Such a file is a zip archive of <archive>/data.pkl, the pickled
// object (usually a state dict), and <archive>/data/<key>, one raw little-endian storage per
// key; tensors in the pickle name a storage, an element offset, a shape and strides.
//
// NOTE: a pickle is a program: Python's unpickler imports and calls whatever it names. This
// reader runs a restricted unpickler that knows only what weight files hold (dicts, lists,
// tuples, strings, numbers, booleans, None, tensors and their storages) and calls only an
// allowlist of rebuild functions, each re-stated here in C++: collections.OrderedDict,
// torch._utils._rebuild_tensor_v2 / _rebuild_tensor / _rebuild_parameter and the typed
// storage classes. Anything else (os.system, builtins.eval, an object's __reduce__, a
// TorchScript archive's __torch__ classes, an unknown opcode) is a named error, never run.
// Every size and offset in the zip and the pickle is bounds-checked before use, so a corrupt
// or hostile file is a Status, never a crash, a hang or an unbounded allocation.
//
// It must not: execute or import anything named by a file, trust a length or offset it has
// not checked, or hand out writable views of the file (the mapping is read-only).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/tensor.h"

namespace prism::formats {

// One torch.save archive, read completely at open: the zip directory, the pickle and every
// tensor it names (entries' CRC-32s checked; deflated entries inflated), so get() cannot meet
// corrupt input.
//
// Names: nested dicts, lists and tuples are flattened with '.', as state dicts name their
// tensors ({"state_dict": {"fc.weight": t}} -> "state_dict.fc.weight"; int keys and list
// indices in decimal); values that are not tensors (an epoch count, a string) are skipped.
// Dtypes: float32, float16, bfloat16, int8, uint8, int32 and int64 as themselves; bool as u8
// (0 / 1, the same bytes). Others (float64, int16, complex) are an unimplemented error.
// Tensors stored contiguous and aligned are zero-copy views of the read-only mapping; others
// (transposed, misaligned, or in a deflated entry) are contiguous copies.
class PytorchCheckpoint {
 public:
  static Result<std::shared_ptr<const PytorchCheckpoint>> open(const std::string& path);
  // The same from bytes already in memory (tests, fuzzing); `origin` names them in errors.
  static Result<std::shared_ptr<const PytorchCheckpoint>> parse(std::shared_ptr<const std::string> bytes,
                                                                const std::string& origin);

  // In the order the pickle holds them (a state dict's module order).
  const std::vector<std::string>& names() const;
  bool contains(const std::string& name) const;
  // Contiguous, in the stored dtype; keeps the mapping alive. Never write through it.
  Result<Tensor> get(const std::string& name) const;
  const std::string& path() const;

  ~PytorchCheckpoint();
  struct Impl;

 private:
  explicit PytorchCheckpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether the file at path begins like a zip archive ("PK\3\4"), as torch.save's output does
// (safetensors files begin with a header length). False when it cannot be read.
bool is_zip_file(const std::string& path);

}  // namespace prism::formats
