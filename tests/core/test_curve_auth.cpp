// Key files of the authenticated control plane (core/curve_auth.h).
#include "core/curve_auth.h"
#include "core/error.h"
#include "core/files.h"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>

using namespace tandem;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("run keys: private files, one pair per worker, the same keys when prepared again") {
  TempDir temp;
  const std::string dir = temp.path() + "/keys";
  const RunKeys keys = prepare_run_keys(dir, {"rollout-0", "learner-0"});
  CHECK(mode_of(dir) == 0700);
  CHECK(mode_of(dir + "/controller.key") == 0600);
  CHECK(mode_of(keys.worker_key_path("rollout-0")) == 0600);
  REQUIRE(keys.worker_public_keys.size() == 2);
  CHECK(keys.worker_public_keys.at("rollout-0") != keys.worker_public_keys.at("learner-0"));
  CHECK(keys.worker_public_keys.at("rollout-0") != keys.controller.own.public_key);

  const CurveKeys worker = read_curve_key_file(keys.worker_key_path("learner-0"));
  CHECK(worker.server_public_key == keys.controller.own.public_key);
  CHECK(worker.own.public_key == keys.worker_public_keys.at("learner-0"));
  CHECK(worker.own.secret_key.size() == 40);

  // A resumed run keeps its keys; a new worker gets a new pair.
  const RunKeys again = prepare_run_keys(dir, {"rollout-0", "learner-0", "rollout-1"});
  CHECK(again.controller.own.public_key == keys.controller.own.public_key);
  CHECK(again.worker_public_keys.at("learner-0") == keys.worker_public_keys.at("learner-0"));
  CHECK(again.worker_public_keys.count("rollout-1") == 1);
}

TEST_CASE("key files: bad lines, missing keys and readable files are refused, naming the file") {
  TempDir temp;
  const CurveKeyPair pair = generate_curve_key_pair();
  CHECK(error_of([&] { parse_curve_key_file("public " + pair.public_key + "\n", "k.key"); }) ==
        "k.key: a key file needs both a public and a secret line");
  CHECK(error_of([&] { parse_curve_key_file("public short\nsecret " + pair.secret_key + "\n", "k.key"); }) ==
        "k.key:1: public is not a 40-character Z85 CURVE key");
  CHECK(error_of([&] { parse_curve_key_file("secret " + pair.secret_key + "\nprivate x\n", "k.key"); }) ==
        "k.key:2: unknown key line \"private\" (allowed: public, secret, server)");

  const std::string path = temp.path() + "/open.key";
  std::ofstream(path) << curve_key_file_text(CurveKeys{pair, ""});
  std::filesystem::permissions(path, std::filesystem::perms(0644));
  CHECK(error_of([&] { read_curve_key_file(path); }) ==
        "key file " + path + " is readable by others (mode 644): refusing it; chmod 600 it");
  std::filesystem::permissions(path, std::filesystem::perms(0600));
  CHECK(read_curve_key_file(path).own.public_key == pair.public_key);
  CHECK(error_of([&] { read_curve_key_file(temp.path() + "/absent.key", 0.2); }) ==
        "key file " + temp.path() + "/absent.key does not exist (waited 0.2 s for the controller to write it)");
}
