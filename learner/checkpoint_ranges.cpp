#include "learner/checkpoint_ranges.h"

#include "core/error.h"
#include "core/text.h"

namespace tandem {

std::string format_ranges(const std::vector<OwnedRange>& ranges) {
  std::string out;
  for (const OwnedRange& r : ranges) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}:{}:{}", r.global_offset, r.local_offset, r.numel);
  }
  return out;
}

std::vector<OwnedRange> parse_ranges(const std::string& text, const std::string& source) {
  std::vector<OwnedRange> ranges;
  if (text.empty()) return ranges;
  for (const std::string& item : split(text, ',')) {
    std::vector<std::string> parts = split(item, ':');
    try {
      if (parts.size() != 3) throw std::invalid_argument("three fields");
      OwnedRange r{std::stoll(parts[0]), std::stoll(parts[1]), std::stoll(parts[2])};
      if (r.global_offset < 0 || r.local_offset < 0 || r.numel < 0) throw std::invalid_argument("negative");
      ranges.push_back(r);
    } catch (const std::exception&) {
      throw Error(fmt::format("{}: range {} is not global:local:numel", source, tandem::quoted(item)));
    }
  }
  return ranges;
}

}  // namespace tandem
