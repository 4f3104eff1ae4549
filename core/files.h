// Small file-system helpers every module uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tandem {

// The whole file, or nullopt (with errno from the failed open) when it cannot be read.
std::optional<std::string> read_file(const std::string& path);

// A file the user named as an input (a config, a dataset): it must be a regular file (not a
// directory, FIFO or device such as /dev/zero) of at most `max_bytes`. Throws Error whose
// text is the reason only ("it is a directory, not a regular file", "No such file or
// directory"): the caller names the file as its messages do.
std::string read_input_file(const std::string& path, uint64_t max_bytes);

// Writes `content` to path.tmp, fsyncs and renames it over `path`: readers see the old
// file or the new one, never a torn one. A full disk is an Error and leaves `path` as it was.
void write_file_atomic(const std::string& path, const std::string& content, unsigned mode = 0644);

// A private temporary directory, removed with its contents on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "tandem-");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace tandem
