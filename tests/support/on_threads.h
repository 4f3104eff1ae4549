// Test-only: ranks as threads. body(rank) runs on `world` threads; any rank's exception
// fails the test, naming the rank and its message.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace tandem::testing {

inline void on_threads(int world, const std::function<void(int)>& body) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        body(rank);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world; ++rank) REQUIRE_MESSAGE(errors[rank].empty(), "rank ", rank, ": ", errors[rank]);
}

}  // namespace tandem::testing
