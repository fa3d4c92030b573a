// engines/denoise/noise.h: Prism's reproducible Gaussian noise: the initial latent of a request
// from its 64-bit seed. The same seed and shape give the same bytes on every machine, thread
// count and Prism version; it is not PyTorch's generator (a seed does not reproduce a diffusers
// image), it is ours, stated here so that it can be kept stable.
// NOTE (the algorithm, frozen): element pair j (j = 0, 1, ...; elements 2j and 2j + 1 of the
// flat row-major tensor) comes from one Philox4x32-10 block (Salmon et al. 2011, Random123's
// multipliers 0xD2511F53 / 0xCD9E8D57 and key bumps 0x9E3779B9 / 0xBB67AE85) with counter
// {lo32(j), hi32(j), 0, 0} and key {lo32(seed), hi32(seed)}. Its words r0..r3 give
// u1 = ((r1:r0 >> 11) + 0.5) / 2^53 and u2 = ((r3:r2 >> 11) + 0.5) / 2^53, both in (0, 1); the
// Box-Muller transform gives z0 = sqrt(-2 ln u1) cos(2 pi u2) (element 2j) and
// z1 = sqrt(-2 ln u1) sin(2 pi u2) (element 2j + 1), in double, then rounded to f32. Any change
// to this is a new generator with a new name, never an edit.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor.h"

namespace prism::engines::denoise {

// One Philox4x32-10 block.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Standard normal f32 noise of `shape` from `seed` (the NOTE's algorithm).
Tensor gaussian_noise(const Dims& shape, uint64_t seed);

}  // namespace prism::engines::denoise
