#pragma once

namespace tfd {

// Makes malloc keep large blocks (received frames, parameter snapshots: hundreds of KB each, per
// message) in its heap for reuse instead of mapping fresh pages for each and unmapping them on
// free, which costs a page fault per 4 KB every time. Process-wide: call once from main().
void KeepLargeAllocationsInHeap();

}  // namespace tfd
