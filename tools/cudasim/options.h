// cudasim's run-time options, read once from the environment:
//   CUDASIM_ORDER   forward | reverse | shuffle: the order in which a block's ready threads
//                   run between switch points, and in which a grid's blocks run
//   CUDASIM_SEED    seed of the shuffled order (default 1)
//   CUDASIM_POISON  fill byte of fresh shared memory and of cudaMalloc'd memory (default
//                   0xFF: float/bf16 NaN, integer -1; 0x7F: float 3.4e38, a large positive int)
//   CUDASIM_STACK_KB  stack of each GPU thread's fiber (default 128, 512 under sanitizers)
//   CUDASIM_DIGEST  file to which every device-to-host copy appends a hash line, so that runs
//                   with different orders can be compared bit for bit (tools/cudasim/run_variants.py)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace cudasim {

enum class Order { forward, reverse, shuffle };

struct Options {
  Order order = Order::forward;
  uint64_t seed = 1;
  unsigned char poison = 0xFF;
  size_t stack_bytes = 128 * 1024;
  std::string digest_path;
};

const Options& options();

}  // namespace cudasim
