// Which part of the global flat parameter layout a rank's optimizer state covers: ddp the
// whole of it, zero2 one shard, fsdp one shard of each unit. Checkpoints store the
// ranges with the state, so any rank count and strategy can read any checkpoint back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem {

struct OwnedRange {
  int64_t global_offset = 0;  // in the unpadded global flat layout
  int64_t local_offset = 0;   // in the rank's local state buffer
  int64_t numel = 0;
};

// "g:l:n,g:l:n" and back (safetensors metadata values are strings). Parsing checks the syntax.
std::string format_ranges(const std::vector<OwnedRange>& ranges);
std::vector<OwnedRange> parse_ranges(const std::string& text, const std::string& source);

}  // namespace tandem
