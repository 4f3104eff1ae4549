// Keeping freed memory in the process for the next allocation of the same size, for the
// processes that compute (workers, benchmarks).
//
// Why: glibc's malloc gives every block over 32 MB (a 151,936-id LM-head tile, a layer's
// activations for a micro-batch) its own mmap and unmaps it on free, so each training
// step asks the kernel for the same gigabytes again and takes a page fault, with the page
// zeroed, on every 4 KiB of them. On a Qwen3-shaped learner step that was 1.1 million
// faults and 10% of the step (bench/RESULTS.md, issue 32, fifth part). With these settings
// a freed block goes back to malloc's free lists and the next step reuses its pages: the
// process keeps its peak heap instead of returning it to the system between steps, as
// PyTorch's CUDA caching allocator does on a GPU.
#pragma once

namespace tandem {

// Large blocks come from the heap instead of their own mappings, and freed memory at the
// heap's top stays in the process. Call once, early, before the big allocations.
// (Threads other than the main one still map blocks over 64 MB of their own: glibc's
// per-thread heaps are at most that large.)
void keep_freed_memory_for_reuse();

}  // namespace tandem
