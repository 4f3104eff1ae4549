// Reading files another process is appending to (metrics.jsonl, samples.jsonl, logs),
// for the dashboard. Only complete lines are returned: a writer may be in the middle of
// a line, and that partial last line is left for the next read. Big files are never read
// whole on a poll: `read_tail_lines` reads a bounded window at the end, and
// `JsonlFollower` reads only what was appended since its last call.
#pragma once

#include <cstdint>
#include <string>
#include <sys/types.h>
#include <vector>

namespace tandem::dashboard {

// The last `max_lines` complete lines of the file (oldest first), looking at no more
// than its last `max_bytes`. A line cut by that window's start is dropped, and so is a
// last line without its newline. Empty when the file does not exist.
std::vector<std::string> read_tail_lines(const std::string& path, size_t max_lines, size_t max_bytes);

// Follows one append-only file. `read_new_lines` returns the complete lines appended
// since the previous call. When the file was replaced or cut back (a resumed run trims
// metrics.jsonl to its checkpoint's step), it starts again from the top and returns
// `restarted = true`, so callers drop what they derived from the old content.
// Not thread-safe: the owner serialises calls.
class JsonlFollower {
 public:
  explicit JsonlFollower(std::string path);

  struct NewLines {
    std::vector<std::string> lines;
    bool restarted = false;  // the file was replaced or cut back: `lines` start at its top
    bool present = false;    // the file exists
    bool more = false;       // stopped at max_bytes: call again for the rest
  };
  NewLines read_new_lines(size_t max_bytes = 16u << 20);

 private:
  bool still_same_file(int fd, ino_t inode, off_t size);

  std::string path_;
  ino_t inode_ = 0;
  off_t offset_ = 0;       // just past the last complete line returned
  std::string tail_seen_;  // the bytes just before offset_, to notice a rewrite in place
};

}  // namespace tandem::dashboard
