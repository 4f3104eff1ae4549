#include "core/files.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tandem {

namespace fs = std::filesystem;

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string read_input_file(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the type check below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw Error(std::string(std::strerror(errno)));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(std::string(std::strerror(err)));
  }
  const char* kind = S_ISDIR(info.st_mode)    ? "a directory"
                     : S_ISFIFO(info.st_mode) ? "a FIFO (named pipe)"
                     : S_ISCHR(info.st_mode)  ? "a character device"
                     : S_ISBLK(info.st_mode)  ? "a block device"
                     : S_ISSOCK(info.st_mode) ? "a socket"
                                              : nullptr;
  if (kind != nullptr || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("it is {}, not a regular file", kind ? kind : "not a regular file"));
  }
  if (static_cast<uint64_t>(info.st_size) > max_bytes) {
    ::close(fd);
    throw Error(fmt::format("it is {} bytes, more than the {} this input may have",
                            static_cast<uint64_t>(info.st_size), max_bytes));
  }
  // To the end (the file may have grown since fstat), and one byte past the bound at most.
  std::string text;
  char chunk[65536];
  while (true) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw Error(std::string(std::strerror(err)));
    }
    if (n == 0) break;
    text.append(chunk, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      throw Error(fmt::format("it grew past the {} bytes this input may have while it was read", max_bytes));
    }
  }
  ::close(fd);
  return text;
}

TempDir::TempDir(const std::string& prefix) {
  std::string pattern = (fs::temp_directory_path() / (prefix + "XXXXXX")).string();
  if (!::mkdtemp(pattern.data())) throw Error(fmt::format("cannot create a temporary directory: {}", std::strerror(errno)));
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void write_file_atomic(const std::string& path, const std::string& content, unsigned mode) {
  std::string temporary = path + ".tmp";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) throw Error(fmt::format("cannot write {}: {}", temporary, std::strerror(errno)));
  // A leftover temporary keeps its own mode (O_CREAT applies `mode` to new files only).
  ::fchmod(fd, static_cast<mode_t>(mode));
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(temporary.c_str());
      throw Error(fmt::format("cannot write {}: {}", temporary, std::strerror(err)));  // e.g. the disk is full
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(temporary.c_str());
    throw Error(fmt::format("cannot write {}: {}", temporary, std::strerror(err)));
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(temporary.c_str());
    throw Error(fmt::format("cannot rename {} to {}: {}", temporary, path, std::strerror(err)));
  }
}

}  // namespace tandem
