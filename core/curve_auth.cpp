#include "core/curve_auth.h"

#include "core/error.h"
#include "core/files.h"
#include "core/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>

namespace tandem {
namespace {

constexpr size_t kZ85KeyLength = 40;

bool is_z85_key(const std::string& key) {
  if (key.size() != kZ85KeyLength) return false;
  uint8_t binary[32];
  return zmq_z85_decode(binary, key.c_str()) != nullptr;
}

// Writes `text` to `path` with mode 0600 from the start: the secret is never readable by
// others, not even for a moment.
void write_private_file(const std::string& path, const std::string& text) {
  const std::string partial = path + ".partial";
  int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create key file {}: {}", partial, std::strerror(errno)));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || std::rename(partial.c_str(), path.c_str()) != 0) {
    throw Error(fmt::format("cannot write key file {}: {}", path, std::strerror(errno)));
  }
}

std::string z85_of(const zmq::message_t& frame) {
  if (frame.size() != 32) return "";
  char text[kZ85KeyLength + 1];
  return zmq_z85_encode(text, static_cast<const uint8_t*>(frame.data()), 32) ? std::string(text) : "";
}

}  // namespace

CurveKeyPair generate_curve_key_pair() {
  char public_key[kZ85KeyLength + 1];
  char secret_key[kZ85KeyLength + 1];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    throw Error(fmt::format("cannot make a CURVE key pair: {} (libzmq built without CURVE?)", zmq_strerror(zmq_errno())));
  }
  return {public_key, secret_key};
}

std::string curve_key_file_text(const CurveKeys& keys) {
  std::string text = fmt::format("public {}\nsecret {}\n", keys.own.public_key, keys.own.secret_key);
  if (!keys.server_public_key.empty()) text += fmt::format("server {}\n", keys.server_public_key);
  return text;
}

CurveKeys parse_curve_key_file(const std::string& text, const std::string& path) {
  CurveKeys keys;
  std::istringstream lines(text);
  std::string line;
  int number = 0;
  while (std::getline(lines, line)) {
    ++number;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string name = line.substr(0, space);
    const std::string value = space == std::string::npos ? "" : line.substr(space + 1);
    std::string* slot = name == "public" ? &keys.own.public_key
                        : name == "secret" ? &keys.own.secret_key
                        : name == "server" ? &keys.server_public_key
                                           : nullptr;
    if (!slot) {
      throw Error(fmt::format("{}:{}: unknown key line \"{}\" (allowed: public, secret, server)", path, number, name));
    }
    if (!is_z85_key(value)) {
      throw Error(fmt::format("{}:{}: {} is not a 40-character Z85 CURVE key", path, number, name));
    }
    *slot = value;
  }
  if (keys.own.public_key.empty() || keys.own.secret_key.empty()) {
    throw Error(fmt::format("{}: a key file needs both a public and a secret line", path));
  }
  return keys;
}

CurveKeys read_curve_key_file(const std::string& path, double wait_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  struct stat info {};
  while (::stat(path.c_str(), &info) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(fmt::format("key file {} does not exist{}", path,
                              wait_s > 0 ? fmt::format(" (waited {} s for the controller to write it)", wait_s) : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if ((info.st_mode & 077) != 0) {
    throw Error(fmt::format("key file {} is readable by others (mode {:o}): refusing it; chmod 600 it",
                            path, info.st_mode & 0777));
  }
  const std::optional<std::string> text = read_file(path);
  if (!text) throw Error(fmt::format("cannot read key file {}", path));
  return parse_curve_key_file(*text, path);
}

std::string RunKeys::worker_key_path(const std::string& worker_name) const {
  return fmt::format("{}/{}.key", dir, worker_name);
}

RunKeys prepare_run_keys(const std::string& dir, const std::vector<std::string>& worker_names) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw Error(fmt::format("cannot create the key directory {}: {}", dir, error.message()));
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, error);
  if (error) throw Error(fmt::format("cannot make {} private: {}", dir, error.message()));

  RunKeys keys;
  keys.dir = dir;
  const std::string controller_path = dir + "/controller.key";
  if (std::filesystem::exists(controller_path)) {
    keys.controller = read_curve_key_file(controller_path);
  } else {
    keys.controller.own = generate_curve_key_pair();
    write_private_file(controller_path, curve_key_file_text(keys.controller));
  }
  for (const std::string& name : worker_names) {
    const std::string path = keys.worker_key_path(name);
    CurveKeys worker;
    if (std::filesystem::exists(path)) {
      worker = read_curve_key_file(path);
    }
    if (worker.own.public_key.empty() || worker.server_public_key != keys.controller.own.public_key) {
      worker.own = generate_curve_key_pair();
      worker.server_public_key = keys.controller.own.public_key;
      write_private_file(path, curve_key_file_text(worker));
    }
    keys.worker_public_keys[name] = worker.own.public_key;
  }
  return keys;
}

CurveAuthenticator::CurveAuthenticator(zmq::context_t& context, std::map<std::string, std::string> allowed)
    : socket_(context, zmq::socket_type::rep) {
  for (const auto& [worker, key] : allowed) user_of_key_[key] = worker;
  socket_.set(zmq::sockopt::linger, 0);
  // libzmq sends a context's authentication requests to this fixed inproc endpoint.
  socket_.bind("inproc://zeromq.zap.01");
  thread_ = std::thread([this] { serve(socket_); });
}

CurveAuthenticator::~CurveAuthenticator() {
  stop_ = true;
  thread_.join();
}

void CurveAuthenticator::serve(zmq::socket_t& socket) {
  zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
  while (!stop_) {
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
    std::vector<zmq::message_t> frames;
    while (true) {
      zmq::message_t frame;
      if (!socket.recv(frame, zmq::recv_flags::dontwait)) break;
      const bool more = frame.more();
      frames.push_back(std::move(frame));
      if (!more) break;
    }
    // Request: version, request id, domain, address, routing id, mechanism, credentials...
    const bool well_formed = frames.size() >= 6 && frames[0].to_string() == "1.0";
    const std::string request_id = frames.size() > 1 ? frames[1].to_string() : "";
    const std::string domain = frames.size() > 2 ? frames[2].to_string() : "";
    const std::string address = frames.size() > 3 ? frames[3].to_string() : "?";
    const std::string mechanism = frames.size() > 5 ? frames[5].to_string() : "";
    const std::string key = mechanism == "CURVE" && frames.size() > 6 ? z85_of(frames[6]) : "";
    std::string user;
    std::string why;
    if (!well_formed) {
      why = "a malformed authentication request";
    } else if (domain != kZapDomain) {
      why = fmt::format("domain \"{}\" is not tandem's", domain);
    } else if (mechanism != "CURVE") {
      why = fmt::format("mechanism {} (only CURVE is admitted)", mechanism.empty() ? "none" : mechanism);
    } else if (auto it = user_of_key_.find(key); it == user_of_key_.end()) {
      why = fmt::format("public key {} is none of this run's workers", key);
    } else {
      user = it->second;
    }
    if (user.empty()) {
      ++refused_;
      log::warn("control channel: refused a connection from {}: {}", address, why);
    }
    const std::vector<std::string> reply = {"1.0", request_id, user.empty() ? "400" : "200",
                                            user.empty() ? "refused" : "OK", user, ""};
    for (size_t i = 0; i < reply.size(); ++i) {
      socket.send(zmq::buffer(reply[i]), i + 1 < reply.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
}

}  // namespace tandem
