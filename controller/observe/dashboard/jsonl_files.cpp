#include "controller/observe/dashboard/jsonl_files.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tandem::dashboard {
namespace {

// How many bytes before the follower's offset it remembers: enough to tell a file that
// was cut back and written again from the one it read, without rereading it.
constexpr size_t kTailCheckBytes = 256;

class FileDescriptor {
 public:
  explicit FileDescriptor(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads [offset, offset + length) or less when the file is shorter.
std::string read_range(int fd, off_t offset, size_t length, const std::string& path) {
  std::string out(length, '\0');
  size_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out.data() + done, length - done, offset + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("cannot read {}: {}", path, std::strerror(errno)));
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

// Splits at '\n', keeping only lines that end with one; drops empty lines.
std::vector<std::string> complete_lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl = text.find('\n'); nl != std::string::npos; nl = text.find('\n', start)) {
    if (nl > start) lines.emplace_back(text, start, nl - start);
    start = nl + 1;
  }
  return lines;
}

}  // namespace

std::vector<std::string> read_tail_lines(const std::string& path, size_t max_lines, size_t max_bytes) {
  FileDescriptor fd(path);
  if (fd.get() < 0) return {};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return {};
  const off_t size = st.st_size;
  const off_t start = size > static_cast<off_t>(max_bytes) ? size - static_cast<off_t>(max_bytes) : 0;
  std::string text = read_range(fd.get(), start, static_cast<size_t>(size - start), path);
  if (start > 0) {
    // The window began mid-line: that line is not whole.
    const size_t nl = text.find('\n');
    text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
  }
  std::vector<std::string> lines = complete_lines(text);
  if (lines.size() > max_lines) lines.erase(lines.begin(), lines.end() - static_cast<ptrdiff_t>(max_lines));
  return lines;
}

JsonlFollower::JsonlFollower(std::string path) : path_(std::move(path)) {}

bool JsonlFollower::still_same_file(int fd, ino_t inode, off_t size) {
  if (offset_ == 0) return true;
  if (inode != inode_ || size < offset_) return false;
  const size_t n = tail_seen_.size();
  return read_range(fd, offset_ - static_cast<off_t>(n), n, path_) == tail_seen_;
}

JsonlFollower::NewLines JsonlFollower::read_new_lines(size_t max_bytes) {
  NewLines out;
  FileDescriptor fd(path_);
  if (fd.get() < 0) {
    // Gone (or not yet written): whatever was read before no longer describes the run.
    out.restarted = offset_ > 0;
    offset_ = 0;
    tail_seen_.clear();
    return out;
  }
  out.present = true;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw Error(fmt::format("cannot stat {}: {}", path_, std::strerror(errno)));
  if (!still_same_file(fd.get(), st.st_ino, st.st_size)) {
    out.restarted = true;
    offset_ = 0;
    tail_seen_.clear();
  }
  inode_ = st.st_ino;
  if (st.st_size <= offset_) return out;

  const size_t available = static_cast<size_t>(st.st_size - offset_);
  std::string text = read_range(fd.get(), offset_, std::min(available, max_bytes), path_);
  size_t last_nl = text.rfind('\n');
  if (last_nl == std::string::npos && available > max_bytes) {
    // One line longer than the budget would never complete within it: read what there is.
    text = read_range(fd.get(), offset_, available, path_);
    last_nl = text.rfind('\n');
  }
  if (last_nl == std::string::npos) return out;  // only a partial line so far
  text.resize(last_nl + 1);
  out.more = offset_ + static_cast<off_t>(text.size()) < st.st_size && available > max_bytes;
  offset_ += static_cast<off_t>(text.size());
  const size_t keep = std::min(kTailCheckBytes, static_cast<size_t>(offset_));
  tail_seen_ = text.size() >= keep ? text.substr(text.size() - keep)
                                   : read_range(fd.get(), offset_ - static_cast<off_t>(keep), keep, path_);
  out.lines = complete_lines(text);
  return out;
}

}  // namespace tandem::dashboard
