// frontends/embed_payload.h: the request and result an embeddings deployment passes
// between the api and its engine. Plain data: no tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "media/image_preprocess.h"
#include "media/media_key.h"
#include "serving/request.h"

namespace prism::frontends {

// One image input of a dual-encoder (CLIP, SigLIP) deployment, preprocessed by the
// EmbedFrontend on the api's I/O thread.
struct EmbedImage {
  std::size_t index = 0;  // its position among the request's inputs (texts and images)
  // The tower's input: one view [3, image_size, image_size] f32. Immutable and shared.
  std::shared_ptr<const media::PixelViews> views;
  media::MediaKey key;  // content key of `views`: the media cache's key for its embedding
};

struct EmbedInput final : serving::Payload {
  // Texts, in input order: the i-th sequence is the i-th input no image takes.
  std::vector<std::vector<int32_t>> sequences;  // checked by EmbedFrontend (length, vocabulary)
  std::vector<EmbedImage> images;               // by ascending index; checked by the engine
  int64_t dims = 0;                             // 0: the model's; checked by EmbedFrontend

  std::size_t num_inputs() const { return sequences.size() + images.size(); }
  // The input position of each sequence: the positions no image takes, in order.
  std::vector<std::size_t> sequence_positions() const {
    std::vector<std::size_t> positions;
    positions.reserve(sequences.size());
    std::size_t next_image = 0;
    for (std::size_t p = 0; positions.size() < sequences.size(); ++p) {
      if (next_image < images.size() && images[next_image].index == p) {
        ++next_image;
        continue;
      }
      positions.push_back(p);
    }
    return positions;
  }
};

struct EmbedOutput final : serving::Payload {
  int64_t dims = 0;
  std::vector<float> vectors;  // [inputs * dims] row-major, in input order (texts and images)
};

}  // namespace prism::frontends
