// Which address a process has on the route to a peer, and whether an endpoint is local.
#pragma once

#include <string>

namespace tandem {

// The local address this host uses to reach the host of `endpoint` (tcp://HOST:PORT):
// the interface the kernel's route to HOST leaves by, found by connecting a UDP socket
// (which sends nothing) and reading its name. "127.0.0.1" for ipc://, inproc:// and
// loopback endpoints. Error when HOST does not resolve or there is no route.
std::string local_address_towards(const std::string& endpoint);

// Whether `endpoint` stays on this host: ipc://, inproc://, or tcp:// on a loopback address.
bool endpoint_is_local(const std::string& endpoint);

// A TCP port free on `host` (an address of this machine) right now: bound with port 0,
// read back, and closed. Another process may take it before it is used again.
int free_tcp_port(const std::string& host);

// This machine's host name (gethostname).
std::string this_hostname();

// The HOST of tcp://HOST:PORT (brackets removed for IPv6); empty for other schemes.
std::string endpoint_host(const std::string& endpoint);

}  // namespace tandem
