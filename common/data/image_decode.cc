#include "common/data/image_decode.h"

#include <stb/stb_image.h>
#include <zlib.h>

#include <cstring>
#include <limits>
#include <memory>

#include <fmt/format.h>

namespace tfd::data {

namespace {

constexpr std::uint8_t kPng[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

std::uint32_t BigEndian32(const std::uint8_t* p) { return std::uint32_t{p[0]} << 24 | std::uint32_t{p[1]} << 16 | std::uint32_t{p[2]} << 8 | p[3]; }

// The bytes a PNG's IDAT data inflates to: a filter byte and ceil(width x bits per pixel / 8) bytes
// per row, per Adam7 pass when interlaced.
std::uint64_t PngRawBytes(std::uint64_t w, std::uint64_t h, std::uint64_t bits_per_pixel, bool interlaced) {
  auto rows = [&](std::uint64_t pw, std::uint64_t ph) { return pw == 0 || ph == 0 ? 0 : ph * (1 + (pw * bits_per_pixel + 7) / 8); };
  if (!interlaced) return rows(w, h);
  static constexpr int kPass[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
  std::uint64_t total = 0;
  for (const auto& p : kPass)
    total += rows(w > std::uint64_t(p[0]) ? (w - p[0] + p[2] - 1) / p[2] : 0, h > std::uint64_t(p[1]) ? (h - p[1] + p[3] - 1) / p[3] : 0);
  return total;
}

// stb_image trusts a PNG's chunk lengths and inflates its IDAT data into a buffer that grows
// without a limit, so a corrupt or hostile PNG could make it allocate gigabytes. Before stb sees
// one, the chunks must lie within the bytes and the data must inflate (counted in a small scratch
// buffer, stopping at the first byte too many) to exactly what the header's pixels need.
Status CheckPng(std::span<const std::uint8_t> b) {
  std::size_t at = sizeof kPng;
  std::uint64_t need = 0;
  z_stream z{};
  if (inflateInit(&z) != Z_OK) return Status::Internal("inflateInit failed");
  std::unique_ptr<z_stream, int (*)(z_stream*)> owner(&z, inflateEnd);
  std::uint8_t scratch[1 << 14];
  std::uint64_t got = 0;
  bool ended = false;
  while (b.size() - at >= 12) {
    const std::uint32_t len = BigEndian32(&b[at]);
    if (len > b.size() - at - 12) return Status::InvalidArgument(fmt::format("PNG chunk at byte {} runs past the end of the image", at));
    const std::uint8_t* type = &b[at + 4];
    const std::uint8_t* data = &b[at + 8];
    if (at == sizeof kPng) {
      if (std::memcmp(type, "IHDR", 4) != 0 || len != 13) return Status::InvalidArgument("PNG without an IHDR chunk first");
      static constexpr int kSamples[7] = {1, 0, 3, 1, 2, 0, 4};  // per color type; 0: none such
      const int color = data[9], depth = data[8];
      if (color > 6 || kSamples[color] == 0) return Status::InvalidArgument(fmt::format("PNG color type {} is not one PNG defines", color));
      need = PngRawBytes(BigEndian32(data), BigEndian32(data + 4), std::uint64_t(kSamples[color]) * depth, data[12] != 0);
    } else if (std::memcmp(type, "IDAT", 4) == 0 && !ended) {
      z.next_in = const_cast<Bytef*>(data);
      z.avail_in = len;
      while (z.avail_in > 0 && !ended) {
        z.next_out = scratch;
        z.avail_out = sizeof scratch;
        const int rc = inflate(&z, Z_NO_FLUSH);
        got += sizeof scratch - z.avail_out;
        if (rc == Z_STREAM_END) ended = true;
        else if (rc != Z_OK && rc != Z_BUF_ERROR) return Status::InvalidArgument(fmt::format("corrupt PNG data: {}", z.msg ? z.msg : "inflate failed"));
        if (got > need) break;
        if (rc == Z_BUF_ERROR && z.avail_out != 0) break;
      }
      if (got > need) return Status::InvalidArgument(fmt::format("PNG data inflates past the {} bytes its pixels need", need));
    }
    at += 12 + std::size_t{len};
  }
  if (got != need) return Status::InvalidArgument(fmt::format("PNG data inflates to {} bytes; its pixels need {}", got, need));
  return Status::Ok();
}

}  // namespace

bool IsPngOrJpeg(std::span<const std::uint8_t> bytes) {
  if (bytes.size() >= sizeof kPng && std::memcmp(bytes.data(), kPng, sizeof kPng) == 0) return true;
  return bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
}

Result<DecodedImage> DecodeImage(std::span<const std::uint8_t> bytes, int channels) {
  if (!IsPngOrJpeg(bytes)) return Status::InvalidArgument("not a PNG or JPEG image");
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) return Status::InvalidArgument("image over 2 GiB");
  const int len = static_cast<int>(bytes.size());
  int w = 0, h = 0, file_channels = 0;
  if (stbi_info_from_memory(bytes.data(), len, &w, &h, &file_channels) == 0)
    return Status::InvalidArgument(fmt::format("cannot decode the image: {}", stbi_failure_reason()));
  if (w < 1 || h < 1 || w > kMaxImageSide || h > kMaxImageSide)
    return Status::InvalidArgument(fmt::format("image is {}x{}; each side must be in [1, {}]", h, w, kMaxImageSide));
  if (bytes[0] == kPng[0]) TFD_RETURN_IF_ERROR(CheckPng(bytes));
  const int want = channels != 0 ? channels : file_channels <= 2 ? 1 : 3;
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(stbi_load_from_memory(bytes.data(), len, &w, &h, &file_channels, want), stbi_image_free);
  if (pixels == nullptr) return Status::InvalidArgument(fmt::format("cannot decode the image: {}", stbi_failure_reason()));
  DecodedImage out;
  out.height = h, out.width = w, out.channels = want;
  out.pixels.assign(pixels.get(), pixels.get() + static_cast<std::size_t>(h) * static_cast<std::size_t>(w) * static_cast<std::size_t>(want));
  return out;
}

}  // namespace tfd::data
