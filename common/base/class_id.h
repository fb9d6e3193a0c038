#pragma once

#include <cstdint>

namespace tfd {

// A class label: the index of an example's class in its dataset's class list, in [0, classes).
// Signed 32 bits, as PyTorch's and TensorFlow's sparse labels are signed integers: wide enough that
// the class count (data::kMaxClasses), not the type, is the limit. A label per example costs 4
// bytes (ImageNet-21k's 14 million images: 56 MB of labels beside their pixels).
using ClassId = std::int32_t;

}  // namespace tfd
