// Buffers that start on a cache line, as PyTorch's CPU allocator's (64 bytes): a layer's vector
// loads and stores then split no line where its rows are whole lines, and the line-at-a-time passes
// (batch_norm_passes.cc) need no odd floats before their first line.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace tfd::tensor {

inline constexpr std::size_t kCacheLineBytes = 64;

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLineBytes})); }
  // The unsized delete: clang (the thread-safety check's compiler) has no sized deallocation by default.
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kCacheLineBytes}); }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

// A model's activations and their gradients.
using AlignedFloats = std::vector<float, CacheLineAllocator<float>>;

}  // namespace tfd::tensor
