// A table of functions by name, for the registries that configs and plugins fill
// (objectives, rewards): built-ins first, then registrations in order. Thread-safe;
// lookups return a copy of the function, so a later registration never invalidates it.
#pragma once

#include "core/error.h"
#include "core/unknown_name.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tandem {

// A handful of entries: a vector is enough.
template <class Fn>
class NamedFunctions {
 public:
  NamedFunctions(std::string what, std::vector<std::pair<std::string, Fn>> built_ins)
      : what_(std::move(what)), entries_(std::move(built_ins)) {}

  void add(const std::string& name, Fn fn) {
    TANDEM_CHECK(!name.empty(), "registering a {} needs a name", what_);
    TANDEM_CHECK(static_cast<bool>(fn), "registering {} {}: the function is empty", what_, name);
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) {
      TANDEM_CHECK(entry.first != name, "a {} named {} is already registered", what_, name);
    }
    entries_.emplace_back(name, std::move(fn));
  }

  Fn find(const std::string& name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& entry : entries_) {
      if (entry.first == name) return entry.second;
    }
    throw_unknown_name(what_, name, names_locked());
  }

  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return names_locked();
  }

 private:
  std::vector<std::string> names_locked() const {
    std::vector<std::string> names;
    for (const auto& entry : entries_) names.push_back(entry.first);
    return names;
  }

  std::string what_;
  mutable std::mutex mutex_;
  std::vector<std::pair<std::string, Fn>> entries_;
};

}  // namespace tandem
