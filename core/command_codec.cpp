#include "core/command_codec.h"

namespace tandem::detail {

std::string describe_kj_exception(const kj::Exception& e) { return e.getDescription().cStr(); }

std::unique_ptr<capnp::FlatArrayMessageReader> open_body(const std::string& bytes, kj::Array<capnp::word>& words,
                                                         const std::string& what, const char* struct_name) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    throw Error(fmt::format("{}: the body is not a {} message ({} bytes, not a whole number of 8-byte words)", what,
                            struct_name, bytes.size()));
  }
  // Frames carry no alignment promise; capnp reads 8-byte words, so copy.
  words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * 2 + 64;  // as protocol.cpp: no amplification
  options.nestingLimit = DecodeLimits{}.nesting_limit;
  try {
    auto reader = std::make_unique<capnp::FlatArrayMessageReader>(words, options);
    if (reader->getEnd() != words.end()) {
      throw Error(fmt::format("{}: the body has bytes after its {} message", what, struct_name));
    }
    return reader;
  } catch (const kj::Exception& e) {
    throw Error(fmt::format("{}: the body is not a valid {}: {}", what, struct_name, describe_kj_exception(e)));
  }
}

}  // namespace tandem::detail
