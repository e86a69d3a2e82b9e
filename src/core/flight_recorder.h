// The flight recorder: per communicator, a ring of its last N operations (BAGUA_TRACE_SIZE, default 1000) with
// their description (kind, sequence number, size, algorithm), start and end times, final state, and for an
// operation that never finished what it was waiting for. Written to the log or to BAGUA_TRACE_DIR when the
// communicator fails, and on demand (bagua_comm_dump_trace); tools/bagua_trace.cc merges the ranks' files.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bagua/bagua.h"

namespace bagua {

class FlightRecorder {
 public:
  enum class State : char { kRunning = 'R', kDone = 'D', kFailed = 'F' };

  void set_capacity(size_t capacity);
  // Forgets every operation recorded so far; ids start again at 1.
  void clear();
  // An operation starts; returns its id (0 when recording is off).
  uint64_t begin(bagua_opkind_t kind, const std::string& description);
  // It ended. waiting_for: what a failed one still waited for ("" when nothing or unknown). A completed one is
  // counted under its collective and algorithm (static strings, e.g. "allreduce", "ring"; nullptr: not counted)
  // for the dump's summary line.
  void end(uint64_t id, State state, bagua_status_t status, const std::string& waiting_for = {},
           const char* collective = nullptr, const char* algorithm = nullptr);
  // Notes what a running operation waits for, for a dump taken while it runs.
  void note_waiting(uint64_t id, const std::string& waiting_for);

  // The text form: a header line, the completed operations by algorithm, then one line per operation, oldest
  // first (tools/bagua_trace.cc reads it):
  //   op <id> <state R|D|F> <status> <start µs since the epoch> <end µs or -> <description> | <waiting for>
  std::string dump(const std::string& header) const;
  // The last `lines` operations only (the log's short form), with a note of how many were left out.
  std::string tail(const std::string& header, size_t lines) const;

 private:
  struct Entry {
    uint64_t id = 0;
    bagua_opkind_t kind = BAGUA_OPKIND_SEND;
    std::string description;
    uint64_t start = 0;  // base/trace_clock.h stamps; 0: not ended
    uint64_t end = 0;
    State state = State::kRunning;
    bagua_status_t status = BAGUA_SUCCESS;
    std::string waiting_for;
  };
  Entry* find(uint64_t id);
  std::string format(const std::string& header, size_t lines) const;

  mutable std::mutex mutex_;
  std::vector<Entry> ring_;                                               // entry id goes to ring_[(id - 1) % capacity]
  std::map<std::pair<const char*, const char*>, uint64_t> by_algorithm_;  // keyed by the static names
  size_t capacity_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace bagua
