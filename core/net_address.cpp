#include "core/net_address.h"

#include "core/error.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tandem {

std::string this_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

std::string endpoint_host(const std::string& endpoint) {
  const std::string scheme = "tcp://";
  if (endpoint.rfind(scheme, 0) != 0) return "";
  std::string rest = endpoint.substr(scheme.size());
  if (!rest.empty() && rest[0] == '[') return rest.substr(1, rest.find(']') - 1);
  return rest.substr(0, rest.rfind(':'));
}

bool endpoint_is_local(const std::string& endpoint) {
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return true;
  const std::string host = endpoint_host(endpoint);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::string local_address_towards(const std::string& endpoint) {
  if (endpoint_is_local(endpoint)) return "127.0.0.1";
  const std::string host = endpoint_host(endpoint);
  if (host.empty()) throw Error(fmt::format("{}: not a tcp://HOST:PORT endpoint", endpoint));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    throw Error(fmt::format("{}: cannot resolve {}: {}", endpoint, host, gai_strerror(rc)));
  }
  std::string error = "no address";
  std::string local;
  for (addrinfo* a = found; a && local.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // connect() on a UDP socket only picks the route and the source address: no packet leaves.
    sockaddr_storage name{};
    socklen_t length = sizeof name;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&name), &length) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = name.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&name)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&name)->sin_addr);
      if (::inet_ntop(name.ss_family, raw, text, sizeof text)) local = text;
    } else {
      error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (local.empty()) throw Error(fmt::format("{}: no route to {}: {}", endpoint, host, error));
  return local;
}

int free_tcp_port(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST | AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), "0", &hints, &found); rc != 0) {
    throw Error(fmt::format("free_tcp_port: {} is not a numeric address: {}", host, gai_strerror(rc)));
  }
  int port = 0;
  std::string error = "no address";
  for (addrinfo* a = found; a && port == 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage name{};
    socklen_t length = sizeof name;
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&name), &length) == 0) {
      port = ntohs(name.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&name)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&name)->sin_port);
    } else {
      error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (port == 0) throw Error(fmt::format("free_tcp_port: cannot bind a port on {}: {}", host, error));
  return port;
}

}  // namespace tandem
