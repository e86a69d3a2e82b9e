// bagua-trace: merges the flight recorders the ranks of a failed job wrote (BAGUA_TRACE_DIR, or files from
// bagua_comm_dump_trace) and says, per communicator, which rank is behind, at which operation, what every rank was
// doing and waiting for, and where ranks called different collectives under one sequence number.
//   bagua-trace DIR      (reads every bagua-trace-*.txt in DIR; docs/tracing.md)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Op {
  uint64_t id = 0;
  char state = 'R';  // R running, D done, F failed
  int status = 0;
  std::string description;
  std::string waiting_for;
  std::optional<uint64_t> sequence;  // collectives and relaxations: the communicator-wide sequence number
  std::string name;                  // "allreduce", "send", ...
};

struct RankTrace {
  int rank = -1;
  int nranks = 0;
  std::string header;
  std::string file;
  std::vector<Op> ops;
};

// "op <id> <state> <status> <start> <end> <description> | <waiting for>"
std::optional<Op> parse_op(const std::string& line) {
  std::istringstream in(line);
  std::string word, start, end;
  Op op;
  if (!(in >> word >> op.id >> op.state >> op.status >> start >> end) || word != "op") return std::nullopt;
  std::string rest;
  std::getline(in, rest);
  size_t bar = rest.rfind(" | ");
  op.description = rest.substr(0, bar);
  if (bar != std::string::npos) op.waiting_for = rest.substr(bar + 3);
  auto trim = [](std::string& s) {
    s.erase(0, s.find_first_not_of(' '));
    s.erase(s.find_last_not_of(' ') + 1);
  };
  trim(op.description);
  trim(op.waiting_for);
  std::istringstream d(op.description);
  std::string hash;
  d >> op.name >> hash;
  // Point to point ("send #3 of ...", "receive #3 of ...") numbers per pair of ranks, not per communicator.
  if (op.name != "send" && op.name != "receive" && hash.size() > 1 && hash[0] == '#')
    op.sequence = std::strtoull(hash.c_str() + 1, nullptr, 10);
  return op;
}

// "# bagua flight recorder: comm 0x1f rank 1 of 4 host h pid 7; reason"
bool parse_header(const std::string& line, std::string* comm, int* rank, int* nranks) {
  // The reason (after "; ") and the communicator's name may hold " rank " too; the host name cannot.
  const std::string fields = line.substr(0, line.find("; "));
  size_t at = fields.find("comm ");
  size_t r = fields.rfind(" rank ");
  if (line.rfind("# bagua flight recorder:", 0) != 0 || at == std::string::npos || r == std::string::npos) return false;
  *comm = line.substr(at + 5, line.find(' ', at + 5) - at - 5);
  return std::sscanf(line.c_str() + r, " rank %d of %d", rank, nranks) == 2;
}

const char* state_word(char s) { return s == 'D' ? "done" : s == 'F' ? "failed" : "running"; }

void report(const std::string& comm, std::map<int, RankTrace>& ranks) {
  int nranks = ranks.begin()->second.nranks;
  std::printf("communicator %s: %d ranks, traces from %zu\n", comm.c_str(), nranks, ranks.size());
  for (int r = 0; r < nranks; ++r)
    if (!ranks.count(r)) std::printf("  rank %d: no trace (it died, or never wrote one)\n", r);
  // Per rank: the highest collective sequence it started, and its unfinished operations.
  std::map<int, uint64_t> reached;
  std::map<uint64_t, std::map<int, const Op*>> by_sequence;
  for (auto& [r, t] : ranks) {
    const Op* last_done = nullptr;
    std::vector<const Op*> open;
    for (const Op& op : t.ops) {
      if (op.sequence) {
        reached[r] = std::max(reached[r], *op.sequence + 1);
        by_sequence[*op.sequence][r] = &op;
      }
      if (op.state == 'D')
        last_done = &op;
      else
        open.push_back(&op);
    }
    std::printf("  rank %d: last completed: %s\n", r, last_done ? last_done->description.c_str() : "(none recorded)");
    for (const Op* op : open)
      std::printf("  rank %d: %s: %s%s%s\n", r, state_word(op->state), op->description.c_str(),
                  op->waiting_for.empty() ? "" : "; waiting for: ", op->waiting_for.c_str());
    if (open.empty()) std::printf("  rank %d: nothing in flight\n", r);
  }
  // Calls that differ under one sequence number.
  bool mismatch = false;
  for (auto& [seq, calls] : by_sequence) {
    const std::string& first = calls.begin()->second->name;
    bool differ = std::any_of(calls.begin(), calls.end(), [&](const auto& c) { return c.second->name != first; });
    if (!differ) continue;
    mismatch = true;
    std::printf("  MISMATCH at collective #%llu:", static_cast<unsigned long long>(seq));
    for (auto& [r, op] : calls) std::printf(" rank %d called %s;", r, op->description.c_str());
    std::printf("\n");
  }
  // Behind: the ranks whose highest collective is below the others'.
  if (!reached.empty()) {
    uint64_t most = 0, least = UINT64_MAX;
    for (auto& [r, n] : reached) most = std::max(most, n), least = std::min(least, n);
    for (int r = 0; r < nranks; ++r)
      if (!reached.count(r) && ranks.count(r)) least = 0;
    if (least < most) {
      std::printf("  behind:");
      for (int r = 0; r < nranks; ++r) {
        if (!ranks.count(r)) continue;
        uint64_t n = reached.count(r) ? reached[r] : 0;
        if (n < most)
          std::printf(" rank %d (last collective #%lld, others reached #%llu);", r, static_cast<long long>(n) - 1,
                      static_cast<unsigned long long>(most - 1));
      }
      std::printf("\n");
    } else if (!mismatch) {
      std::printf("  every rank reached collective #%llu\n", static_cast<unsigned long long>(most - 1));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) == "--help") {
    std::fprintf(stderr, "usage: bagua-trace DIR   (the flight recorders a job wrote there; docs/tracing.md)\n");
    return 2;
  }
  std::map<std::string, std::map<int, RankTrace>> comms;
  std::error_code ec;
  std::filesystem::directory_iterator it(argv[1], ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const auto& entry = *it;
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) continue;
    std::ifstream in(entry.path());
    std::string line, comm;
    RankTrace t;
    t.file = entry.path().string();
    if (!std::getline(in, line) || !parse_header(line, &comm, &t.rank, &t.nranks)) continue;
    t.header = line;
    while (std::getline(in, line))
      if (auto op = parse_op(line)) t.ops.push_back(*op);
    auto& slot = comms[comm][t.rank];
    if (!slot.file.empty()) {  // two files of one rank (an on-demand dump and the failure's): keep the later
      uint64_t slot_last = slot.ops.empty() ? 0 : slot.ops.back().id, t_last = t.ops.empty() ? 0 : t.ops.back().id;
      std::fprintf(stderr, "bagua-trace: %s and %s both hold rank %d of %s; reading %s\n", slot.file.c_str(),
                   t.file.c_str(), t.rank, comm.c_str(), (t_last >= slot_last ? t.file : slot.file).c_str());
      if (t_last < slot_last) continue;
    }
    slot = std::move(t);
  }
  if (ec) {
    std::fprintf(stderr, "bagua-trace: cannot read %s: %s\n", argv[1], ec.message().c_str());
    return 1;
  }
  if (comms.empty()) {
    std::fprintf(stderr, "bagua-trace: no flight recorder files in %s\n", argv[1]);
    return 1;
  }
  for (auto& [comm, ranks] : comms) report(comm, ranks);
  return 0;
}
