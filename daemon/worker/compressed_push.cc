#include "daemon/worker/compressed_push.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "common/base/check.h"
#include "common/compress/half.h"

namespace tfd::worker {
namespace {

// What the frame points into, kept alive with it.
struct Encoded {
  std::vector<std::uint16_t> half;
  std::vector<std::uint32_t> indices;
  std::vector<float> values;
  std::vector<float> deposit;  // the error feedback deposited, when any
  std::shared_ptr<const void> keepalive;
};

}  // namespace

wire::OutFrame EncodeCompressedPush(const wire::Push& push, wire::GradEncoding encoding, std::span<const std::span<const float>> slices,
                                    const CompressedExtras& extras, std::shared_ptr<const void> keepalive, std::size_t* bytes) {
  auto e = std::make_shared<Encoded>();
  e->keepalive = std::move(keepalive);
  wire::PushCompressed m;
  m.push = push;
  m.encoding = encoding;
  m.save_request = extras.save_request;
  if (extras.deposit_request != 0) {  // one span in the frame: the slices side by side
    for (std::span<const float> s : extras.deposit) e->deposit.insert(e->deposit.end(), s.begin(), s.end());
    m.deposit_request = extras.deposit_request;
    m.deposit = std::as_bytes(std::span<const float>(e->deposit));
  }
  for (std::span<const float> s : slices) m.count += s.size();
  if (encoding == wire::GradEncoding::kSparse) {
    TFD_CHECK(m.count <= UINT32_MAX);  // a shard's indices are u32 on the wire
    std::uint32_t at = 0;
    for (std::span<const float> s : slices) {
      for (float v : s) {
        if (v != 0.0f) {
          e->indices.push_back(at);
          e->values.push_back(v);
        }
        ++at;
      }
    }
    m.indices = std::as_bytes(std::span<const std::uint32_t>(e->indices));
    m.values = std::as_bytes(std::span<const float>(e->values));
  } else {
    const compress::Half h = encoding == wire::GradEncoding::kFp16 ? compress::Half::kFp16 : compress::Half::kBf16;
    e->half.resize(static_cast<std::size_t>(m.count));
    std::size_t at = 0;
    for (std::span<const float> s : slices) {
      compress::EncodeHalf(h, s, std::span<std::uint16_t>(e->half).subspan(at, s.size()));
      at += s.size();
    }
    m.values = std::as_bytes(std::span<const std::uint16_t>(e->half));
  }
  *bytes = m.values.size() + m.indices.size();
  return wire::Encode(m, std::move(e));
}

}  // namespace tfd::worker
