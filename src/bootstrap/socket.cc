#include "bootstrap/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/env.h"
#include "base/error.h"

namespace bagua {

namespace {
constexpr int kPollSliceMs = 100;

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) fail_errno(errno, "fcntl(O_NONBLOCK)");
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}
}  // namespace

SockAddr SockAddr::resolve(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0 || result == nullptr)
    fail(BAGUA_ERR_INVALID_USAGE, "cannot resolve host '{}': {}", host, gai_strerror(rc));
  SockAddr addr;
  std::memcpy(&addr.storage, result->ai_addr, result->ai_addrlen);
  addr.length = result->ai_addrlen;
  freeaddrinfo(result);
  addr.set_port(port);
  return addr;
}

SockAddr SockAddr::parse(const std::string& host_port) {
  std::string host;
  std::string port_text;
  if (!host_port.empty() && host_port[0] == '[') {
    size_t close = host_port.find(']');
    if (close == std::string::npos || close + 1 >= host_port.size() || host_port[close + 1] != ':')
      fail(BAGUA_ERR_INVALID_USAGE, "address '{}' is not [ipv6]:port", host_port);
    host = host_port.substr(1, close - 1);
    port_text = host_port.substr(close + 2);
  } else {
    size_t colon = host_port.rfind(':');
    if (colon == std::string::npos || colon == 0)
      fail(BAGUA_ERR_INVALID_USAGE, "address '{}' is not host:port", host_port);
    host = host_port.substr(0, colon);
    port_text = host_port.substr(colon + 1);
  }
  char* end = nullptr;
  long port = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || port < 1 || port > 65535)
    fail(BAGUA_ERR_INVALID_USAGE, "address '{}' has no valid port (1-65535)", host_port);
  return resolve(host, static_cast<uint16_t>(port));
}

std::string SockAddr::str() const {
  char host[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, host, sizeof(host));
    return std::string(host) + ":" + std::to_string(port());
  }
  if (storage.ss_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(port());
  }
  return "<no address>";
}

uint16_t SockAddr::port() const {
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SockAddr::set_port(uint16_t port) {
  if (storage.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (storage.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

static bool find_interface(const char* ifname, bool skip_loopback, SockAddr* out) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  // Prefer IPv4, then IPv6, for the same interface choice.
  for (int family : {AF_INET, AF_INET6}) {
    for (ifaddrs* it = list; it != nullptr && !found; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != family) continue;
      if (!(it->ifa_flags & IFF_UP)) continue;
      if (skip_loopback && (it->ifa_flags & IFF_LOOPBACK)) continue;
      if (ifname && std::strncmp(it->ifa_name, ifname, std::strlen(ifname)) != 0) continue;
      if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(it->ifa_addr)->sin6_addr))
        continue;
      out->length = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&out->storage, it->ifa_addr, out->length);
      out->set_port(0);
      found = true;
    }
    if (found) break;
  }
  freeifaddrs(list);
  return found;
}

SockAddr interface_address(const std::string& ifname) {
  SockAddr addr;
  if (!find_interface(ifname.c_str(), false, &addr))
    fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_SOCKET_IFNAME='{}' matches no interface that is up", ifname);
  return addr;
}

bool socket_ifname_address(SockAddr* out) {
  const char* ifname = env_get_nonempty("BAGUA_SOCKET_IFNAME");
  if (ifname == nullptr) return false;
  *out = interface_address(ifname);
  return true;
}

SockAddr choose_listen_address() {
  SockAddr addr;
  if (socket_ifname_address(&addr)) return addr;
  if (find_interface(nullptr, true, &addr)) return addr;
  return SockAddr::resolve("127.0.0.1", 0);
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Socket Socket::listen(const SockAddr& address, int backlog) {
  Socket sock(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) fail_errno(errno, "socket()");
  int one = 1;
  setsockopt(sock.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(sock.fd(), address.raw(), address.length) != 0) fail_errno(errno, "bind(" + address.str() + ")");
  if (::listen(sock.fd(), backlog) != 0) fail_errno(errno, "listen(" + address.str() + ")");
  set_nonblocking(sock.fd());
  return sock;
}

Socket Socket::connect(const SockAddr& address, Deadline deadline, const std::atomic<bool>* stop) {
  int retry_ms = 10;
  for (;;) {
    Socket sock(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock.valid()) fail_errno(errno, "socket()");
    set_nonblocking(sock.fd());
    int rc = ::connect(sock.fd(), address.raw(), address.length);
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      wait_ready(sock.fd(), POLLOUT, deadline, stop, "connect");
      socklen_t len = sizeof(err);
      getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    }
    if (err == 0) {
      set_nodelay(sock.fd());
      return sock;
    }
    if (err != ECONNREFUSED && err != ECONNRESET && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH)
      fail_errno(err, "connect(" + address.str() + ")");
    if (deadline.expired())
      fail(BAGUA_ERR_TIMEOUT, "could not connect to {}: {} until the timeout", address.str(), std::strerror(err));
    if (stop && stop->load()) fail(BAGUA_ERR_ABORTED, "aborted while connecting to {}", address.str());
    usleep(static_cast<useconds_t>(std::min(retry_ms, deadline.remaining_ms())) * 1000);
    retry_ms = std::min(retry_ms * 2, 200);
  }
}

Socket Socket::try_connect(const SockAddr& address, Deadline deadline, const std::atomic<bool>* stop, int* error) {
  Socket sock(::socket(address.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) {
    *error = errno;
    return Socket();
  }
  set_nonblocking(sock.fd());
  int err = ::connect(sock.fd(), address.raw(), address.length) == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    try {
      wait_ready(sock.fd(), POLLOUT, deadline, stop, "connect");
      socklen_t len = sizeof(err);
      getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    } catch (const Error&) {
      err = ETIMEDOUT;
    }
  }
  *error = err;
  if (err != 0) return Socket();
  set_nodelay(sock.fd());
  return sock;
}

SockAddr Socket::local_address() const {
  SockAddr addr;
  addr.length = sizeof(addr.storage);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&addr.storage), &addr.length) != 0) fail_errno(errno, "getsockname");
  return addr;
}

SockAddr Socket::peer_address() const {
  SockAddr addr;
  addr.length = sizeof(addr.storage);
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr.storage), &addr.length) != 0) addr.length = 0;
  return addr;
}

void wait_ready(int fd, short events, Deadline deadline, const std::atomic<bool>* stop, const char* what) {
  for (;;) {
    if (stop && stop->load()) fail(BAGUA_ERR_ABORTED, "{} aborted", what);
    if (deadline.expired()) fail(BAGUA_ERR_TIMEOUT, "{} timed out", what);
    pollfd pfd{fd, events, 0};
    int rc = ::poll(&pfd, 1, deadline.remaining_ms(kPollSliceMs));
    if (rc < 0 && errno != EINTR) fail_errno(errno, std::string("poll during ") + what);
    if (rc > 0) return;  // readiness, or an error/hangup that the following read/write reports
  }
}

ssize_t Socket::try_send(const void* data, size_t size) {
  ssize_t n = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return n;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  return -1;
}

ssize_t Socket::try_recv(void* data, size_t size) {
  ssize_t n = ::recv(fd_, data, size, MSG_DONTWAIT);
  if (n > 0) return n;
  if (n == 0) return -1;
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  return -1;
}

void Socket::send_all(const void* data, size_t size, Deadline deadline, const std::atomic<bool>* stop) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = try_send(p, size);
    if (n < 0)
      fail(BAGUA_ERR_REMOTE, "connection to {} broke while sending: {}", peer_address().str(), std::strerror(errno));
    p += n;
    size -= static_cast<size_t>(n);
    if (size > 0 && n == 0) wait_ready(fd_, POLLOUT, deadline, stop, "send");
  }
}

void Socket::recv_all(void* data, size_t size, Deadline deadline, const std::atomic<bool>* stop) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd_, p, size, MSG_DONTWAIT);
    if (n == 0) fail(BAGUA_ERR_REMOTE, "connection closed by peer {}", peer_address().str());
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
        fail(BAGUA_ERR_REMOTE, "connection to {} broke while receiving: {}", peer_address().str(),
             std::strerror(errno));
      wait_ready(fd_, POLLIN, deadline, stop, "receive");
      continue;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace bagua
