#include "weight_sync/directory_store.h"

#include "core/error.h"

#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace tandem {

namespace fs = std::filesystem;

namespace {

// Gloo's keys name ranks ("rank_2"): say "rank 2".
std::string describe_keys(const std::vector<std::string>& keys) {
  std::string text;
  for (const std::string& key : keys) {
    const std::string number = key.rfind("rank_", 0) == 0 ? key.substr(5) : key;
    const bool rank = !number.empty() && number.find_first_not_of("0123456789") == std::string::npos;
    text += std::string(text.empty() ? "" : ", ") + (rank ? "rank " + number : "key " + key);
  }
  return text;
}

}  // namespace

DirectoryStore::DirectoryStore(std::string directory, std::chrono::milliseconds timeout, std::string where)
    : directory_(std::move(directory)), timeout_(timeout), where_(std::move(where)) {
  std::error_code ec;
  fs::create_directories(directory_, ec);
  if (ec) throw Error(fmt::format("{}: cannot create rendezvous directory {}: {}", where_, directory_, ec.message()));
}

std::string DirectoryStore::path_of(const std::string& key) const {
  std::string safe;
  for (char c : key) safe += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return directory_ + "/key-" + safe;
}

void DirectoryStore::set(const std::string& key, const std::vector<char>& data) {
  const std::string path = path_of(key);
  const std::string tmp = fmt::format("{}.tmp-{}", path, ::getpid());  // the key is this rank's own
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) throw Error(fmt::format("{}: cannot write rendezvous file {}", where_, tmp));
  }
  // Readers see the whole file or none: rename is atomic.
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(fmt::format("{}: cannot publish rendezvous file {}: {}", where_, path, ec.message()));
  own_keys_.push_back(path);
}

std::vector<char> DirectoryStore::get(const std::string& key) {
  wait({key});
  std::ifstream in(path_of(key), std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && in.fail()) throw Error(fmt::format("{}: cannot read rendezvous file {}", where_, path_of(key)));
  return data;
}

void DirectoryStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void DirectoryStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) {
  // Our timeout, not Gloo's: one limit for the whole group, set by the caller.
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    std::vector<std::string> absent;
    for (const std::string& key : keys) {
      if (!fs::exists(path_of(key))) absent.push_back(key);
    }
    if (absent.empty()) return;
    if (fs::exists(directory_ + "/abandoned")) {
      throw Error(fmt::format("{}: the group in {} was abandoned (a rank died) while waiting for {}", where_, directory_,
                              describe_keys(absent)));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(fmt::format("{}: {} did not join the rendezvous in {} within {} s", where_, describe_keys(absent),
                              directory_, static_cast<double>(timeout_.count()) / 1000.0));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void DirectoryStore::abandon(const std::string& directory) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  std::ofstream(directory + "/abandoned");  // best effort: without it, waiting ranks fail at their timeout
}

void DirectoryStore::remove_own_keys() {
  for (const std::string& path : own_keys_) {
    std::error_code ec;
    fs::remove(path, ec);  // best effort: a leftover key only matters to a group reusing the directory
  }
  own_keys_.clear();
}

}  // namespace tandem
