// ZeroMQ CURVE on the control plane: who may talk to the controller.
//
// A run has one key pair for the controller and one per worker, written under
// RUN_DIR/keys (directory 0700, files 0600). A worker's key file holds its own pair and
// the controller's public key; the launcher hands a worker the file's path (environment
// TANDEM_WORKER_KEYS or `tandem worker --keys`), never key material on a command line.
//
// The controller's ROUTER is a CURVE server, and a ZAP handler (ZeroMQ's authentication
// hook, RFC 27) admits only the run's worker keys, each as the user id of its worker's
// name: a registration whose claimed worker differs from its key's is refused too.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

struct CurveKeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;
};

// A fresh key pair from libzmq (Error when libzmq was built without CURVE).
CurveKeyPair generate_curve_key_pair();

// What one side of the control channel needs: its own pair, and on a worker the
// controller's public key (empty on the controller).
struct CurveKeys {
  CurveKeyPair own;
  std::string server_public_key;
};

// Key file text: "public Z85\nsecret Z85\n[server Z85\n]". Parsing checks every line and
// names `path` and the line in its Error.
std::string curve_key_file_text(const CurveKeys& keys);
CurveKeys parse_curve_key_file(const std::string& text, const std::string& path);
// Reads a key file, waiting up to wait_s for it to appear (a worker started before the
// controller wrote it, as Kubernetes may). Refuses a file others can read.
CurveKeys read_curve_key_file(const std::string& path, double wait_s = 0.0);

// The run's keys: controller.key and <worker>.key (worker names as WorkerId::name()),
// created under `dir` (0700) with mode 0600, or read back when they exist (a resumed run
// keeps its keys, so that workers started with the old files still get in).
struct RunKeys {
  CurveKeys controller;
  std::map<std::string, std::string> worker_public_keys;  // worker name -> public key
  std::string dir;
  std::string worker_key_path(const std::string& worker_name) const;
};
RunKeys prepare_run_keys(const std::string& dir, const std::vector<std::string>& worker_names);

// The ZAP handler of one ZeroMQ context: a thread answering libzmq's authentication
// requests for the CURVE sockets of that context with zap_domain "tandem". Admits the
// listed public keys (user id: the worker's name); every other peer is refused, counted
// and logged (its address and key).
class CurveAuthenticator {
 public:
  CurveAuthenticator(zmq::context_t& context, std::map<std::string, std::string> allowed_public_keys);
  ~CurveAuthenticator();
  CurveAuthenticator(const CurveAuthenticator&) = delete;
  CurveAuthenticator& operator=(const CurveAuthenticator&) = delete;

  uint64_t refused() const { return refused_; }

 private:
  void serve(zmq::socket_t& socket);

  std::map<std::string, std::string> user_of_key_;  // public key (Z85) -> worker name
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  zmq::socket_t socket_;
  std::thread thread_;
};

// The zap_domain the controller's socket and the authenticator share.
inline constexpr const char* kZapDomain = "tandem";

}  // namespace tandem
