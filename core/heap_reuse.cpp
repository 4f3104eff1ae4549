#include "core/heap_reuse.h"

#include <malloc.h>

#include <climits>

namespace tandem {

void keep_freed_memory_for_reuse() {
  ::mallopt(M_MMAP_MAX, 0);                // no block gets a mapping of its own
  ::mallopt(M_TRIM_THRESHOLD, INT_MAX);    // never shrink the heap's top on free
  ::mallopt(M_TOP_PAD, 64 << 20);          // grow the heap 64 MB at a time, not a page at a time
}

}  // namespace tandem
