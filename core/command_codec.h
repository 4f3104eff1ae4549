// Command and reply bodies on the control plane: each is a Cap'n Proto message of its
// own (a struct declared in the .capnp file beside the role that serves it), carried as
// the Data body of core/protocol.capnp's Command, Reply or Progress. Decoding reads the
// whole message once under the protocol's limits (traversal bounded by the body's size,
// nesting by DecodeLimits), so a truncated or hostile body is an Error naming the
// command and the struct, never a crash or a raw library message later on.
#pragma once

#include "core/error.h"
#include "core/protocol.h"

#include <capnp/message.h>
#include <capnp/schema.h>
#include <capnp/serialize.h>
#include <kj/array.h>

#include <cstring>
#include <memory>
#include <string>

namespace tandem {

// The flat bytes of a `Struct` message that `build(Struct::Builder)` fills in.
template <typename Struct, typename Build>
std::string encode_body(Build&& build) {
  capnp::MallocMessageBuilder message;
  build(message.initRoot<Struct>());
  const kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  const kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// A struct with no fields set: commands without arguments, replies without results.
template <typename Struct>
std::string empty_body() {
  return encode_body<Struct>([](typename Struct::Builder) {});
}

namespace detail {
// Copies `bytes` into aligned words and opens them; throws Error naming `what`.
std::unique_ptr<capnp::FlatArrayMessageReader> open_body(const std::string& bytes, kj::Array<capnp::word>& words,
                                                         const std::string& what, const char* struct_name);
std::string describe_kj_exception(const kj::Exception& e);
}  // namespace detail

// A decoded body; the reader and the bytes it points into live as long as this does.
template <typename Struct>
class Body {
 public:
  // `what`: the command (or "<command> reply") for errors.
  Body(const std::string& bytes, const std::string& what) : what_(what) {
    const std::string name = capnp::Schema::from<Struct>().getShortDisplayName().cStr();
    reader_ = detail::open_body(bytes, words_, what, name.c_str());
    try {
      root_ = reader_->template getRoot<Struct>();
      root_.totalSize();  // walks every pointer now: a malformed one fails here, located
    } catch (const kj::Exception& e) {
      throw Error(fmt::format("{}: the body is not a valid {}: {}", what, name, detail::describe_kj_exception(e)));
    }
  }
  typename Struct::Reader operator*() const { return root_; }
  const typename Struct::Reader* operator->() const { return &root_; }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  kj::Array<capnp::word> words_;
  std::unique_ptr<capnp::FlatArrayMessageReader> reader_;
  typename Struct::Reader root_;
};

// Text and Data fields as std::string.
inline std::string to_string(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }
inline std::string to_string(capnp::Data::Reader data) {
  return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
}
inline capnp::Data::Reader as_data(const std::string& bytes) {
  return capnp::Data::Reader(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size());
}

}  // namespace tandem
