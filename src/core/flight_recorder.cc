#include "core/flight_recorder.h"

#include <algorithm>
#include <cstdint>

#include "base/logging.h"
#include "base/trace_clock.h"

namespace bagua {

namespace {
// One line per field: no newlines or the separator inside a field.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == '|') c = ' ';
  return s;
}
}  // namespace

void FlightRecorder::set_capacity(size_t capacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  capacity_ = capacity;
  ring_.assign(capacity, Entry{});
}

void FlightRecorder::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  ring_.assign(capacity_, Entry{});
  by_algorithm_.clear();
  next_id_ = 1;
}

uint64_t FlightRecorder::begin(bagua_opkind_t kind, const std::string& description) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capacity_ == 0) return 0;
  uint64_t id = next_id_++;
  Entry& e = ring_[(id - 1) % capacity_];
  // Field by field, so that the strings reuse their storage once the ring has gone round: no allocation.
  e.id = id;
  e.kind = kind;
  e.description.assign(description);
  e.start = trace_clock::now();
  e.end = 0;
  e.state = State::kRunning;
  e.status = BAGUA_SUCCESS;
  e.waiting_for.clear();
  return id;
}

FlightRecorder::Entry* FlightRecorder::find(uint64_t id) {
  if (id == 0 || capacity_ == 0) return nullptr;
  Entry& e = ring_[(id - 1) % capacity_];
  return e.id == id ? &e : nullptr;  // overwritten by a newer one: nothing to update
}

void FlightRecorder::end(uint64_t id, State state, bagua_status_t status, const std::string& waiting_for,
                         const char* collective, const char* algorithm) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state == State::kDone && collective != nullptr && algorithm != nullptr) ++by_algorithm_[{collective, algorithm}];
  Entry* e = find(id);
  if (e == nullptr || e->state != State::kRunning) return;
  e->state = state;
  e->status = status;
  e->end = trace_clock::now();
  if (state == State::kDone)
    e->waiting_for.clear();  // an on-demand dump may have noted a wait it no longer has
  else if (!waiting_for.empty())
    e->waiting_for = waiting_for;
}

void FlightRecorder::note_waiting(uint64_t id, const std::string& waiting_for) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (Entry* e = find(id)) e->waiting_for = waiting_for;
}

std::string FlightRecorder::format(const std::string& header, size_t lines) const {
  // Copy under the lock, format outside it: operations keep recording meanwhile.
  std::vector<Entry> entries;
  std::map<std::pair<const char*, const char*>, uint64_t> by_algorithm;
  uint64_t recorded = 0, kept = 0, shown = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded = next_id_ - 1;
    kept = std::min<uint64_t>(recorded, capacity_);
    shown = std::min<uint64_t>(kept, lines);
    entries.reserve(shown);
    for (uint64_t id = recorded - shown + 1; id <= recorded; ++id) entries.push_back(ring_[(id - 1) % capacity_]);
    by_algorithm = by_algorithm_;
  }
  std::string out = fmt::format("# {}\n# {} operations recorded, the last {} kept, {} shown\n", one_line(header),
                                recorded, kept, shown);
  if (!by_algorithm.empty()) {
    out += "# completed by algorithm:";
    std::map<std::string, uint64_t> by_name;  // the same name may come from two pointers: merge, and sort by name
    for (const auto& [names, count] : by_algorithm) by_name[fmt::format("{} {}", names.first, names.second)] += count;
    for (const auto& [name, count] : by_name) out += fmt::format(" {} {};", name, count);
    out.back() = '\n';
  }
  for (const Entry& e : entries) {
    out += fmt::format("op {} {} {} {} {} {} | {}\n", e.id, static_cast<char>(e.state), static_cast<int>(e.status),
                       trace_clock::to_epoch_us(e.start),
                       e.end == 0 ? std::string("-") : std::to_string(trace_clock::to_epoch_us(e.end)),
                       one_line(e.description), one_line(e.waiting_for));
  }
  return out;
}

std::string FlightRecorder::dump(const std::string& header) const { return format(header, SIZE_MAX); }

std::string FlightRecorder::tail(const std::string& header, size_t lines) const { return format(header, lines); }

}  // namespace bagua
