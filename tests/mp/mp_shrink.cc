// bagua_comm_shrink with real processes (docs/bootstrap.md, "Shrink"). The parent serves the
// rendezvous and kills ranks with SIGKILL; each rank is this program re-executed with --rank-main, reporting to the
// parent through a pipe. Scenarios:
//   kill      4 ranks shrink their healthy communicator (same ranks, same order) and loop allreduce on the result
//             until the parent kills one (each rank in turn, the natural leader rank 0 included); the 3 survivors
//             shrink again
//   during    5 ranks: one killed, then a second killed 0-30 ms after the first survivor enters the agreement
//   majority  4 ranks: two killed at once; the 2 survivors are not a majority and must say so
//   late      5 ranks: one killed; one survivor enters the agreement after the grace period and is left out
// and, run by scripts/netns-cluster.sh with one rank per host, `mp_shrink partition CUT [MS]`: every rank blackholes
// the routes to the hosts on the other side of CUT (ranks < CUT | ranks >= CUT), the collectives time out, and
// only a side holding a majority of the ranks may shrink; the other gets REMOTE naming the majority rule. With MS
// the cut comes MS ms into the shrink of a healthy communicator instead, after the agreement's connections are up
// (where the shrink completed before the cut, the ranks shrink the new communicator, which holds the cut-off rank).
// Oracle: a survivor whose shrink succeeds reports its new rank and size, the old ranks of the new communicator
// (an allgather of old ranks on it) and whether an allreduce of (old rank + 1) gave the exact int32 sum of the
// members. All that succeed must report one membership, consistent with their new ranks.
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mp/mp_check.h"
#include "mp/mp_job.h"

namespace {

constexpr double kTimeoutS = 3.0;  // BAGUA_TIMEOUT of every rank; the shrink grace period is a quarter of it

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out.empty() ? "-" : out;
}

// ---- rank side ----

// Checks the new communicator: allgather of old ranks, then the exact allreduce. Returns the members in new-rank
// order via *members and the status of the first failing call.
bagua_status_t check_members(bagua_comm_t comm, int old_rank, std::vector<int>* members, bool* exact) {
  int size = 0;
  MP_OK(bagua_comm_size(comm, &size));
  std::vector<int32_t> gathered(static_cast<size_t>(size));
  int32_t mine = old_rank;
  bagua_status_t st = bagua_allgather(&mine, gathered.data(), 1, BAGUA_INT32, comm, nullptr);
  if (st != BAGUA_SUCCESS) return st;
  members->assign(gathered.begin(), gathered.end());
  int32_t value = old_rank + 1, sum = 0;
  st = bagua_allreduce(&value, &sum, 1, BAGUA_INT32, BAGUA_SUM, comm, nullptr);
  if (st != BAGUA_SUCCESS) return st;
  int32_t expected = 0;
  for (int m : *members) expected += m + 1;
  *exact = sum == expected;
  return BAGUA_SUCCESS;
}

int rank_main(const std::string& mode, int late_rank, int late_ms) {
  int report = std::atoi(std::getenv("MP_REPORT_FD"));
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank = 0, size = 0;
  MP_OK(bagua_comm_rank(comm, &rank));
  MP_OK(bagua_comm_size(comm, &size));
  bagua_comm_t unused = nullptr;
  MP_CHECK(bagua_comm_shrink(comm, nullptr) == BAGUA_ERR_INVALID_ARGUMENT);
  MP_CHECK(bagua_comm_shrink(nullptr, &unused) == BAGUA_ERR_INVALID_ARGUMENT);
  if (mode == "kill") {
    // Shrinking a healthy communicator gives the same ranks in the same order.
    bagua_comm_t same = nullptr;
    MP_OK(bagua_comm_shrink(comm, &same));
    int same_rank = -1, same_size = -1;
    MP_OK(bagua_comm_rank(same, &same_rank));
    MP_OK(bagua_comm_size(same, &same_size));
    MP_CHECK(same_rank == rank && same_size == size);
    MP_OK(bagua_comm_destroy(comm));
    comm = same;
  }
  dprintf(report, "ready %d\n", rank);
  int32_t x = 1;
  bagua_status_t status = BAGUA_SUCCESS;
  for (long i = 0; status == BAGUA_SUCCESS && i < 100000000; ++i)
    status = bagua_allreduce(&x, &x, 1, BAGUA_INT32, BAGUA_MAX, comm, nullptr);
  if (rank == late_rank) std::this_thread::sleep_for(std::chrono::milliseconds(late_ms));
  dprintf(report, "shrinking %d\n", rank);
  auto start = mp::Clock::now();
  bagua_comm_t shrunk = nullptr;
  bagua_status_t shrink_status = bagua_comm_shrink(comm, &shrunk);
  // A member that died after the decision makes the new communicator's formation fail on every survivor; they
  // shrink the old communicator again.
  int attempts = 1;
  if (mode == "during" && shrink_status != BAGUA_SUCCESS) {
    ++attempts;
    shrink_status = bagua_comm_shrink(comm, &shrunk);
  }
  long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(mp::Clock::now() - start).count();
  std::string message = shrink_status == BAGUA_SUCCESS ? "" : bagua_get_last_error(comm);
  int new_rank = -1, new_size = -1;
  std::vector<int> members;
  bool exact = false;
  bagua_status_t op_status = BAGUA_SUCCESS;
  if (shrink_status == BAGUA_SUCCESS) {
    MP_OK(bagua_comm_rank(shrunk, &new_rank));
    MP_OK(bagua_comm_size(shrunk, &new_size));
    op_status = check_members(shrunk, rank, &members, &exact);
    if (op_status != BAGUA_SUCCESS) message = bagua_get_last_error(shrunk);
    MP_OK(bagua_comm_destroy(shrunk));
  }
  MP_OK(bagua_comm_destroy(comm));
  std::replace(message.begin(), message.end(), '\n', ' ');
  dprintf(report, "shrunk %d %d %lld %d %d %d %d %d %s %s\n", rank, static_cast<int>(shrink_status), ms, new_rank,
          new_size, static_cast<int>(op_status), exact ? 1 : 0, attempts, join(members).c_str(), message.c_str());
  return 0;
}

// One rank per host of the netns test bed (host h has address 10.99.0.(h+1), scripts/netns-cluster.sh).
int partition_main(int cut, int cut_during_shrink_ms) {
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank = 0, size = 0;
  MP_OK(bagua_comm_rank(comm, &rank));
  MP_OK(bagua_comm_size(comm, &size));
  MP_CHECK(mp_env_int("BAGUA_LOCAL_SIZE") == 1 && cut > 0 && cut < size);
  int32_t x = 1;
  MP_OK(bagua_allreduce(&x, &x, 1, BAGUA_INT32, BAGUA_SUM, comm, nullptr));
  MP_OK(bagua_barrier(comm, nullptr));
  const bool low_side = rank < cut;
  std::vector<int> side;
  std::vector<std::string> cuts;
  for (int r = 0; r < size; ++r) {
    if ((r < cut) == low_side)
      side.push_back(r);
    else
      cuts.push_back("ip route add blackhole 10.99.0." + std::to_string(r + 1) + "/32");
  }
  auto cut_now = [&] {
    for (const std::string& cmd : cuts) MP_CHECK(std::system(cmd.c_str()) == 0);
  };
  bagua_status_t status = BAGUA_SUCCESS;
  double failed_after = 0;
  std::thread cutter;
  if (cut_during_shrink_ms < 0) {
    // The partition breaks a collective, which times out; then the ranks shrink.
    cut_now();
    auto cut_at = mp::Clock::now();
    while (status == BAGUA_SUCCESS) status = bagua_allreduce(&x, &x, 1, BAGUA_INT32, BAGUA_MAX, comm, nullptr);
    failed_after = mp_seconds_since(cut_at);
  } else {
    // The partition comes while the ranks shrink a healthy communicator, once the agreement's connections are up.
    cutter = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(cut_during_shrink_ms));
      cut_now();
    });
  }
  // A member cut off after the decision makes the formation fail; the survivors shrink again.
  auto shrink_with_retry = [](bagua_comm_t from, bagua_comm_t* to) {
    bagua_status_t st = bagua_comm_shrink(from, to);
    if (st != BAGUA_SUCCESS && std::strstr(bagua_get_last_error(from), "call bagua_comm_shrink again"))
      st = bagua_comm_shrink(from, to);
    return st;
  };
  auto start = mp::Clock::now();
  bagua_comm_t shrunk = nullptr;
  bagua_status_t shrink_status = shrink_with_retry(comm, &shrunk);
  double shrink_s = mp_seconds_since(start);
  if (cutter.joinable()) cutter.join();
  // A cut that lands after the shrink completed leaves every rank a communicator that still holds rank(s) of the
  // other side: its first operation fails everywhere (MPI ULFM's rule), and the ranks shrink that one in turn.
  bagua_comm_t judged = comm;  // the communicator whose shrink is judged
  bool after_completion = false;
  std::vector<bagua_comm_t> made;
  auto shrink_the_new_one = [&] {
    after_completion = true;
    made.push_back(shrunk);
    judged = shrunk;
    bagua_comm_t again = nullptr;
    shrink_status = shrink_with_retry(shrunk, &again);
    shrunk = again;
  };
  const bool majority = 2 * static_cast<int>(side.size()) > size;
  int failures = 0;
  if (majority) {
    std::vector<int> members;
    bool exact = false;
    bagua_status_t op = shrink_status == BAGUA_SUCCESS ? check_members(shrunk, rank, &members, &exact) : shrink_status;
    if (cut_during_shrink_ms >= 0 && shrink_status == BAGUA_SUCCESS && op != BAGUA_SUCCESS) {
      shrink_the_new_one();
      members.clear();
      op = shrink_status == BAGUA_SUCCESS ? check_members(shrunk, rank, &members, &exact) : shrink_status;
    }
    if (op != BAGUA_SUCCESS || !exact || members != side) {
      std::fprintf(stderr, "partition: rank %d (majority side %s) got shrink %s, check %s, members %s: %s\n", rank,
                   join(side).c_str(), bagua_status_string(shrink_status), bagua_status_string(op),
                   join(members).c_str(), bagua_get_last_error(shrunk ? shrunk : judged));
      ++failures;
    }
  } else {
    if (cut_during_shrink_ms >= 0 && shrink_status == BAGUA_SUCCESS) {
      int32_t y = 1;
      if (bagua_allreduce(&y, &y, 1, BAGUA_INT32, BAGUA_SUM, shrunk, nullptr) != BAGUA_SUCCESS) shrink_the_new_one();
    }
    if (shrink_status != BAGUA_ERR_REMOTE ||
        std::string(bagua_get_last_error(judged)).find("majority") == std::string::npos) {
      std::fprintf(stderr, "partition: rank %d (minority side %s) got %s: %s\n", rank, join(side).c_str(),
                   bagua_status_string(shrink_status), bagua_get_last_error(judged));
      ++failures;
    }
  }
  if (after_completion)
    std::printf("partition: rank %d: the cut came after the shrink completed; shrank the new communicator\n", rank);
  std::printf(
      "partition: rank %d on side %s: collective failed with %s after %.2f s; shrink returned %s after %.2f s%s\n",
      rank, join(side).c_str(), bagua_status_string(status), failed_after, bagua_status_string(shrink_status), shrink_s,
      failures ? " (FAILED)" : "");
  if (shrunk) MP_OK(bagua_comm_destroy(shrunk));
  for (bagua_comm_t c : made) MP_OK(bagua_comm_destroy(c));
  MP_OK(bagua_comm_destroy(comm));
  return failures ? 1 : 0;
}

// ---- parent side ----

struct Outcome {
  bool started = false;  // reported "shrinking"
  bool done = false;
  int shrink_status = 0;
  long long ms = 0;
  int new_rank = -1;
  int new_size = -1;
  int op_status = 0;
  bool exact = false;
  int attempts = 0;
  std::string members;
  std::string message;
};

struct ShrinkJob {
  mp::Job job;
  std::vector<bool> ready;
  std::vector<Outcome> outcomes;
};

ShrinkJob launch(const mp::JobRoot& root, int nranks, const std::string& mode, int late_rank = -1, int late_ms = 0) {
  return ShrinkJob{
      mp::launch(root, "mp_shrink", {mode, std::to_string(late_rank), std::to_string(late_ms)}, nranks, kTimeoutS),
      std::vector<bool>(nranks, false), std::vector<Outcome>(nranks)};
}

bool read_until(ShrinkJob& job, double seconds, const std::function<bool()>& until) {
  auto on_line = [&](const std::string& line) {
    int rank = -1;
    if (std::sscanf(line.c_str(), "ready %d", &rank) == 1) {
      job.ready[rank] = true;
    } else if (std::sscanf(line.c_str(), "shrinking %d", &rank) == 1) {
      job.outcomes[rank].started = true;
    } else {
      Outcome o;
      int exact = 0, consumed = 0;
      char members[4096] = {0};
      if (std::sscanf(line.c_str(), "shrunk %d %d %lld %d %d %d %d %d %4095s %n", &rank, &o.shrink_status, &o.ms,
                      &o.new_rank, &o.new_size, &o.op_status, &exact, &o.attempts, members, &consumed) >= 9) {
        o.started = o.done = true;
        o.exact = exact == 1;
        o.members = members;
        o.message = line.substr(static_cast<size_t>(consumed));
        job.outcomes[rank] = o;
      }
    }
  };
  return mp::read_reports(job.job, seconds, on_line, until);
}

bool all_ready(ShrinkJob& job) {
  return read_until(job, 20, [&] { return std::all_of(job.ready.begin(), job.ready.end(), [](bool r) { return r; }); });
}

bool survivors_done(ShrinkJob& job, const std::set<int>& dead, double seconds) {
  return read_until(job, seconds, [&] {
    for (size_t r = 0; r < job.outcomes.size(); ++r)
      if (!dead.count(static_cast<int>(r)) && !job.outcomes[r].done) return false;
    return true;
  });
}

std::string expected_members(int nranks, const std::set<int>& dead) {
  std::vector<int> alive;
  for (int r = 0; r < nranks; ++r)
    if (!dead.count(r)) alive.push_back(r);
  return join(alive);
}

// Every survivor shrinks to the same, exact membership.
void kill_one(const mp::JobRoot& root) {
  const int nranks = 4;
  std::mt19937 rng(11);
  long long slowest = 0;
  for (int victim = 0; victim < nranks; ++victim) {
    ShrinkJob job = launch(root, nranks, "kill");
    if (!all_ready(job)) {
      EXPECT(false, "kill rank %d: ranks never became ready", victim);
      mp::reap(job.job);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 30)(rng)));
    auto killed = mp::Clock::now();
    kill(job.job.pids[victim], SIGKILL);
    std::set<int> dead{victim};
    EXPECT(survivors_done(job, dead, 2 * kTimeoutS + 3), "kill rank %d: a survivor did not finish shrinking", victim);
    long long since_kill = std::chrono::duration_cast<std::chrono::milliseconds>(mp::Clock::now() - killed).count();
    slowest = std::max(slowest, since_kill);
    std::string want = expected_members(nranks, dead);
    for (int r = 0; r < nranks; ++r) {
      if (r == victim || !job.outcomes[r].done) continue;
      const Outcome& o = job.outcomes[r];
      EXPECT(o.shrink_status == BAGUA_SUCCESS && o.op_status == BAGUA_SUCCESS && o.exact && o.members == want,
             "kill rank %d: rank %d got shrink %d, op %d, exact %d, members %s (want %s): %s", victim, r,
             o.shrink_status, o.op_status, o.exact, o.members.c_str(), want.c_str(), o.message.c_str());
      EXPECT(o.ms <= static_cast<long long>(kTimeoutS * 1000), "kill rank %d: rank %d's shrink took %lld ms", victim, r,
             o.ms);
    }
    mp::reap(job.job);
  }
  std::printf(
      "kill: each of 4 ranks killed in turn; the 3 survivors shrank to the same exact communicator, the "
      "last of them %lld ms after the kill (slowest of 4)\n",
      slowest);
}

// A second rank dies during the agreement: whoever succeeds agrees with every other success.
void kill_during_agreement(const mp::JobRoot& root, int repetitions) {
  const int nranks = 5;
  std::mt19937 rng(23);
  int successes = 0, errors = 0, with_second = 0, second_attempts = 0;
  for (int rep = 0; rep < repetitions; ++rep) {
    ShrinkJob job = launch(root, nranks, "during");
    if (!all_ready(job)) {
      EXPECT(false, "during rep %d: ranks never became ready", rep);
      mp::reap(job.job);
      continue;
    }
    int first = rep % nranks, second = (rep + 2) % nranks;
    kill(job.job.pids[first], SIGKILL);
    read_until(job, 2 * kTimeoutS, [&] {
      for (int r = 0; r < nranks; ++r)
        if (r != first && job.outcomes[r].started) return true;
      return false;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 30)(rng)));
    kill(job.job.pids[second], SIGKILL);
    std::set<int> dead{first, second};
    EXPECT(survivors_done(job, dead, 3 * kTimeoutS + 3), "during rep %d: a survivor did not finish", rep);
    std::map<std::string, int> memberships;  // from successful shrinks: size and new rank of each old rank
    std::string agreed;
    for (int r = 0; r < nranks; ++r) {
      const Outcome& o = job.outcomes[r];
      if (dead.count(r) || !o.done) continue;
      if (o.shrink_status != BAGUA_SUCCESS) {
        ++errors;
        EXPECT(o.shrink_status == BAGUA_ERR_REMOTE || o.shrink_status == BAGUA_ERR_TIMEOUT,
               "during rep %d: rank %d's shrink returned %d: %s", rep, r, o.shrink_status, o.message.c_str());
        continue;
      }
      ++successes;
      second_attempts += o.attempts > 1;
      // New ranks and sizes must fit one membership; where the checks ran, it is the allgathered one.
      memberships[std::to_string(o.new_size)] += 1;
      if (o.op_status == BAGUA_SUCCESS) {
        EXPECT(o.exact, "during rep %d: rank %d's allreduce on the new communicator was wrong", rep, r);
        EXPECT(agreed.empty() || agreed == o.members, "during rep %d: rank %d got members %s, another got %s", rep, r,
               o.members.c_str(), agreed.c_str());
        agreed = o.members;
        EXPECT(("," + o.members + ",").find("," + std::to_string(first) + ",") == std::string::npos,
               "during rep %d: members %s include the first victim %d", rep, o.members.c_str(), first);
      } else {
        with_second += 1;  // the new communicator holds the second victim, who died after the decision
        EXPECT(o.op_status == BAGUA_ERR_REMOTE || o.op_status == BAGUA_ERR_TIMEOUT,
               "during rep %d: rank %d's check on the new communicator returned %d: %s", rep, r, o.op_status,
               o.message.c_str());
      }
    }
    EXPECT(memberships.size() <= 1, "during rep %d: survivors got new communicators of different sizes", rep);
    mp::reap(job.job);
  }
  std::printf(
      "during: %d repetitions, a second rank killed 0-30 ms into the agreement: %d survivors shrank (%d "
      "at the second call, after a first whose new communicator held the second victim; %d with the second "
      "victim a member of a communicator that then failed), %d returned an error; all agreed\n",
      repetitions, successes, second_attempts, with_second, errors);
}

// Two of four ranks die: the other two are not a majority.
void no_majority(const mp::JobRoot& root) {
  ShrinkJob job = launch(root, 4, "majority");
  if (!all_ready(job)) {
    EXPECT(false, "majority: ranks never became ready");
    mp::reap(job.job);
    return;
  }
  kill(job.job.pids[2], SIGKILL);
  kill(job.job.pids[3], SIGKILL);
  EXPECT(survivors_done(job, {2, 3}, 2 * kTimeoutS + 3), "majority: a survivor did not finish");
  for (int r = 0; r < 2; ++r) {
    const Outcome& o = job.outcomes[r];
    EXPECT(o.done && o.shrink_status == BAGUA_ERR_REMOTE && o.message.find("majority") != std::string::npos,
           "majority: rank %d got %d after %lld ms: %s", r, o.shrink_status, o.ms, o.message.c_str());
    EXPECT(o.ms <= static_cast<long long>(kTimeoutS * 1000) + 500, "majority: rank %d took %lld ms", r, o.ms);
    std::printf("majority: rank %d got %s after %lld ms: %s\n", r,
                bagua_status_string(static_cast<bagua_status_t>(o.shrink_status)), o.ms, o.message.c_str());
  }
  mp::reap(job.job);
}

// A survivor that comes after the grace period is left out; the others go on without it.
void late_survivor(const mp::JobRoot& root) {
  const int late = 3, late_ms = static_cast<int>(kTimeoutS * 1000 / 4) + 1000;
  ShrinkJob job = launch(root, 5, "late", late, late_ms);
  if (!all_ready(job)) {
    EXPECT(false, "late: ranks never became ready");
    mp::reap(job.job);
    return;
  }
  kill(job.job.pids[4], SIGKILL);
  EXPECT(survivors_done(job, {4}, 3 * kTimeoutS + 3), "late: a survivor did not finish");
  for (int r = 0; r < 4; ++r) {
    const Outcome& o = job.outcomes[r];
    if (r == late)
      EXPECT(o.done && o.shrink_status == BAGUA_ERR_REMOTE, "late: the late rank got %d: %s", o.shrink_status,
             o.message.c_str());
    else
      EXPECT(o.done && o.shrink_status == BAGUA_SUCCESS && o.exact && o.members == "0,1,2",
             "late: rank %d got shrink %d, members %s: %s", r, o.shrink_status, o.members.c_str(), o.message.c_str());
  }
  std::printf("late: ranks 0-2 shrank without the late rank 3, which got: %s\n", job.outcomes[late].message.c_str());
  mp::reap(job.job);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--rank-main") == 0)
    return rank_main(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (argc >= 3 && std::strcmp(argv[1], "partition") == 0)
    return partition_main(std::atoi(argv[2]), argc > 3 ? std::atoi(argv[3]) : -1);
  int repetitions = argc > 1 ? std::atoi(argv[1]) : 6;
  mp::JobRoot root;
  kill_one(root);
  kill_during_agreement(root, repetitions);
  no_majority(root);
  late_survivor(root);
  std::printf("%s\n", mp::g_failures == 0 ? "shrink: ok" : "shrink: FAILED");
  return mp::g_failures == 0 ? 0 : 1;
}
