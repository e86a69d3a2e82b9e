// TCP sockets for the bootstrap: addresses, listen/connect, and sends/receives that honour a deadline
// and a stop flag. Every blocking call waits in poll() slices so that an abort is seen within 100 ms.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "base/deadline.h"

namespace bagua {

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t length = 0;

  // "1.2.3.4:5", "[::1]:5" or "hostname:5". Throws INVALID_USAGE when it does not parse or resolve.
  static SockAddr parse(const std::string& host_port);
  static SockAddr resolve(const std::string& host, uint16_t port);
  std::string str() const;
  uint16_t port() const;
  void set_port(uint16_t port);
  const sockaddr* raw() const { return reinterpret_cast<const sockaddr*>(&storage); }
};

// Address to listen on: BAGUA_SOCKET_IFNAME (exact name or prefix) when set, else the first non-loopback
// IPv4 interface that is up, else loopback. Port 0.
SockAddr choose_listen_address();
// Address of the interface named (or prefixed) ifname; throws INVALID_USAGE when there is none.
SockAddr interface_address(const std::string& ifname);
// The address of BAGUA_SOCKET_IFNAME's interface into *out; false when the variable is unset.
bool socket_ifname_address(SockAddr* out);

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  static Socket listen(const SockAddr& address, int backlog = 512);
  // Connects, retrying refused connections until the deadline (the listener may not be up yet).
  static Socket connect(const SockAddr& address, Deadline deadline, const std::atomic<bool>* stop = nullptr);
  // One attempt, never throws: an invalid socket and *error (errno: ECONNREFUSED, ETIMEDOUT at the deadline or on
  // a stop, ...) when it fails.
  static Socket try_connect(const SockAddr& address, Deadline deadline, const std::atomic<bool>* stop, int* error);

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();
  // Wakes any thread polling this socket; safe from another thread.
  void shutdown();

  SockAddr local_address() const;
  SockAddr peer_address() const;

  // Throw TIMEOUT past the deadline, ABORTED when *stop is set, REMOTE on EOF or a reset connection.
  void send_all(const void* data, size_t size, Deadline deadline, const std::atomic<bool>* stop = nullptr);
  void recv_all(void* data, size_t size, Deadline deadline, const std::atomic<bool>* stop = nullptr);

  // Non-blocking forms: bytes moved, 0 when it would block; -1 on EOF or error.
  ssize_t try_send(const void* data, size_t size);
  ssize_t try_recv(void* data, size_t size);

 private:
  int fd_ = -1;
};

// Waits until fd is ready for `events` (POLLIN/POLLOUT); same error rules as send_all.
void wait_ready(int fd, short events, Deadline deadline, const std::atomic<bool>* stop, const char* what);

}  // namespace bagua
