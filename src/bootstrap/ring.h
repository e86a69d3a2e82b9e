// Out-of-band channel of a communicator: authenticated TCP connections to the next and previous rank.
// It carries bootstrap allgather blocks (worker addresses, splits) and failure notices, and its EOF is the fast sign
// that a neighbour died. A failure notice travels around the ring in both directions so every rank learns of it.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "bagua/bagua.h"
#include "bootstrap/rendezvous.h"
#include "bootstrap/wire.h"

namespace bagua {

class BootstrapRing {
 public:
  // Connects rank to its ring neighbours listed in `table`; `listener` is this rank's listener.
  static std::unique_ptr<BootstrapRing> connect(int rank, const JobTable& table, Socket listener, const Bytes& secret,
                                                Deadline deadline, const std::atomic<bool>* stop);
  ~BootstrapRing();

  // Gathers one block from every rank, in rank order. Blocks may differ in size (at most 64 MiB).
  std::vector<Bytes> allgather(const Bytes& mine, Deadline deadline);

  // Reads what the neighbours sent without blocking. Throws REMOTE when a neighbour died or passed on a
  // failure notice. Safe to call often (one poll() per call).
  void check_health();
  // Best effort, from any thread: tells both neighbours this rank failed (they pass it on), or left cleanly.
  void notify_failure(bagua_status_t status, const std::string& message);
  void say_goodbye();
  // Wakes any blocked call; from any thread.
  void shutdown();

 private:
  struct Link {
    Socket sock;
    int peer = -1;
    FrameParser parser;
    bool said_bye = false;
    std::atomic<bool> closed{false};  // read by notify_failure on another thread
    std::deque<Frame> data;           // DATA frames not yet consumed by allgather
  };

  BootstrapRing(int rank, int nranks, const std::atomic<bool>* stop) : rank_(rank), nranks_(nranks), stop_(stop) {}
  // Reads whatever is available on `link` (blocking up to wait_ms for the first byte).
  void pump(Link& link, int wait_ms);
  void handle(Link& link, Frame frame);
  void send_on(Link& link, FrameType type, const Bytes& payload, Deadline deadline);
  Frame next_data(Deadline deadline);
  void send_control(Link& link, FrameType type, const Bytes& payload);

  int rank_;
  int nranks_;
  const std::atomic<bool>* stop_;
  Link next_;
  Link prev_;
  uint64_t sequence_ = 0;
  std::mutex send_mutex_;  // notify_failure may run on another thread
  std::atomic<bool> relayed_failure_{false};
  std::atomic<bool> mid_frame_{false};  // a frame is partly sent; a control frame now would corrupt the stream
};

}  // namespace bagua
