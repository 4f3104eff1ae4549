// Gloo's rendezvous store over a directory (one file per key), with our timeout and
// errors. Gloo's own FileStore waits 30 s on get() whatever the context's timeout is and
// reports a hashed file name; this one waits up to the group's timeout and names the rank
// that did not come. Ranks on several hosts need a directory they all see (NFS works:
// it polls, no inotify). Internal to the collective transport (includes Gloo).
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

namespace tandem {

class DirectoryStore : public gloo::rendezvous::Store {
 public:
  // Creates `directory` if absent. Errors start with `where`.
  DirectoryStore(std::string directory, std::chrono::milliseconds timeout, std::string where);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

  // Removes the keys this store has set (once every rank has read them), leaving the
  // directory clean for the next group.
  void remove_own_keys();

  // Marks `directory` abandoned (a file named "abandoned"; keys are "key-*"): ranks
  // waiting in it fail at once instead of at the timeout. For a group one of whose ranks
  // died before it connected.
  static void abandon(const std::string& directory);

 private:
  std::string path_of(const std::string& key) const;

  std::string directory_;
  std::chrono::milliseconds timeout_;
  std::string where_;
  std::vector<std::string> own_keys_;
};

}  // namespace tandem
