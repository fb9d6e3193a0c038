#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tfd::wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian; so is every supported host");

// Appends little-endian fields to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<std::byte>* out) : out_(out) {}
  void U8(std::uint8_t v) { Raw(&v, 1); }
  void U16(std::uint16_t v) { Raw(&v, 2); }
  void U32(std::uint32_t v) { Raw(&v, 4); }
  void U64(std::uint64_t v) { Raw(&v, 8); }
  void F64(double v) { Raw(&v, 8); }
  // u16 length, then the bytes; longer strings are cut at 65535 bytes.
  void Str(std::string_view s) {
    const auto n = static_cast<std::uint16_t>(std::min<std::size_t>(s.size(), 0xffff));
    U16(n);
    Raw(s.data(), n);
  }
  void Floats(std::span<const float> v) { Raw(v.data(), v.size_bytes()); }
  void Raw(const void* p, std::size_t n) {
    if (n == 0) return;
    const std::size_t old = out_->size();
    out_->resize(old + n);
    std::memcpy(out_->data() + old, p, n);
  }

 private:
  std::vector<std::byte>* out_;
};

// Reads little-endian fields from a byte span. Every read checks the remaining length first and
// returns false (consuming nothing) when it is short; lengths read from the bytes are bounded by
// what remains before anything is allocated.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}
  bool U8(std::uint8_t* v) { return Raw(v, 1); }
  bool U16(std::uint16_t* v) { return Raw(v, 2); }
  bool U32(std::uint32_t* v) { return Raw(v, 4); }
  bool U64(std::uint64_t* v) { return Raw(v, 8); }
  bool F64(double* v) { return Raw(v, 8); }
  bool Str(std::string* s, std::size_t max_len) {
    std::uint16_t n = 0;
    if (in_.size() < 2) return false;
    std::memcpy(&n, in_.data(), 2);
    if (n > max_len || in_.size() < 2u + n) return false;
    s->assign(reinterpret_cast<const char*>(in_.data() + 2), n);
    in_ = in_.subspan(2u + n);
    return true;
  }
  // A view of the next `count` floats (no copy; may be unaligned, so read them with memcpy).
  bool FloatBytes(std::uint64_t count, std::span<const std::byte>* out) {
    if (count > in_.size() / 4) return false;
    *out = in_.first(static_cast<std::size_t>(count * 4));
    in_ = in_.subspan(static_cast<std::size_t>(count * 4));
    return true;
  }
  // A view of the next `count` values of `width` bytes each (16-bit values, u32 indices; no copy).
  bool ElementBytes(std::uint64_t count, std::size_t width, std::span<const std::byte>* out) {
    if (count > in_.size() / width) return false;
    *out = in_.first(static_cast<std::size_t>(count * width));
    in_ = in_.subspan(static_cast<std::size_t>(count * width));
    return true;
  }
  // Exactly out.size() bytes, copied.
  bool Bytes(std::span<std::byte> out) { return Raw(out.data(), out.size()); }
  std::size_t remaining() const { return in_.size(); }

 private:
  bool Raw(void* p, std::size_t n) {
    if (in_.size() < n) return false;
    std::memcpy(p, in_.data(), n);
    in_ = in_.subspan(n);
    return true;
  }
  std::span<const std::byte> in_;
};

}  // namespace tfd::wire
