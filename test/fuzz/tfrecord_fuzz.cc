// The TFRecord reader (common/data/tfrecord.h) on one input in memory: the record framing, each
// record parsed as a tf.train.Example and laid out, under two specs (every key as float features;
// one bytes feature "image" as a raw 4x4 grayscale image or a PNG/JPEG). Run on the input as it is
// and on a copy whose record CRCs are recomputed, so mutations reach the protobuf parse and the
// layout checks instead of stopping at a CRC. A failure must be InvalidArgument naming the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "common/data/tfrecord.h"
#include "common/summary/record.h"

namespace {

using tfd::config::DataSpec;
using namespace tfd::data;

void Check(std::string_view bytes, const DataSpec& spec) {
  const tfrecord::Opener open = [&](const std::string&) -> tfd::Result<std::unique_ptr<tfrecord::Input>> { return tfrecord::MemoryInput(bytes); };
  tfd::Result<Examples> r = tfrecord::ReadAll(spec, {"fuzz.tfrecord"}, open);
  if (!r.ok()) {
    if (r.status().code() != tfd::Code::kInvalidArgument) std::abort();
    return;
  }
  const auto values = static_cast<std::size_t>(r->size * r->values());
  if (r->features.size() != values * DTypeBytes(r->dtype)) std::abort();
  const std::size_t labels = r->num_targets > 0 ? r->targets.size() / static_cast<std::size_t>(r->num_targets)
                                                : r->label_ids.size() + r->label_text.size();
  if (labels != static_cast<std::size_t>(r->size)) std::abort();
}

// Rewrites each record's two CRCs for as many whole records as the bytes hold.
std::string FixCrcs(std::string b) {
  std::size_t pos = 0;
  while (b.size() - pos >= tfrecord::kOverheadBytes) {
    std::uint64_t n = 0;
    std::memcpy(&n, b.data() + pos, 8);
    if (n > b.size() - pos - tfrecord::kOverheadBytes) break;
    const std::uint32_t head = tfd::summary::MaskedCrc32c(std::as_bytes(std::span(b.data() + pos, 8)));
    const std::uint32_t data = tfd::summary::MaskedCrc32c(std::as_bytes(std::span(b.data() + pos + 12, n)));
    std::memcpy(b.data() + pos + 8, &head, 4);
    std::memcpy(b.data() + pos + 12 + n, &data, 4);
    pos += tfrecord::kOverheadBytes + n;
  }
  return b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  DataSpec table;
  table.format = DataSpec::Format::kTfrecord;
  DataSpec image = table;
  image.feature_names = {"image"};
  image.image_height = image.image_width = 4;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string fixed = FixCrcs(std::string(bytes));
  for (const DataSpec* spec : {&table, &image}) {
    Check(bytes, *spec);
    Check(fixed, *spec);
  }
  return 0;
}
