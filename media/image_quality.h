// media/image_quality.h: how close two images of the same size are, as the quality side of a
// speed knob is judged (a cheaper generation against the full-compute one of the same seed).
// Plain arrays, no tensors; 8-bit RGB (media/image.h).
#pragma once

#include "media/image.h"

namespace prism::media {

// Peak signal-to-noise ratio in dB over every channel of every pixel, peak 255:
// 10 log10(255^2 / MSE); +infinity for identical images. The images must be the same size.
double psnr(const Image& a, const Image& b);

// Structural similarity (Wang et al. 2004) on the luma (BT.601: 0.299 R + 0.587 G + 0.114 B)
// with the paper's constants: an 11 x 11 Gaussian window of sigma 1.5, K1 = 0.01, K2 = 0.03,
// L = 255, the mean of the SSIM map over the positions where the window fits (no padding).
// 1 for identical images; images smaller than the window are compared as one window.
double ssim(const Image& a, const Image& b);

}  // namespace prism::media
