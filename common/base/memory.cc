#include "common/base/memory.h"

#include <malloc.h>

namespace tfd {

void KeepLargeAllocationsInHeap() {
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

}  // namespace tfd
