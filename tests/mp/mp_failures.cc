// Failure handling with real processes: a rank killed with SIGKILL mid-allreduce (4 B and 4 MiB, 20 times
// each), a rank stopped with SIGSTOP (survivors time out), abort from a second thread during a blocked
// receive, and the poisoning rules afterwards. The parent serves the rendezvous and does the killing; each
// rank is this program re-executed with --rank-main, reporting to the parent through a pipe.
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mp/mp_check.h"
#include "mp/mp_job.h"

namespace {

using mp::Clock;
using mp::now_ns;

// ---- rank side ----

// Loops allreduce until it fails, then checks that the failure poisons every later call, and that
// abort and destroy are quick. Reports "rank status error_time_ns poison_ok teardown_ms".
int rank_main(size_t bytes) {
  int report = std::atoi(std::getenv("MP_REPORT_FD"));
  bagua_comm_t comm = nullptr;
  MP_OK(bagua_comm_init_from_env(&comm));
  int rank = 0;
  MP_OK(bagua_comm_rank(comm, &rank));
  std::vector<char> buf(bytes, 1);
  size_t count = bytes / sizeof(float);
  MP_OK(bagua_allreduce(buf.data(), buf.data(), count, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr));
  dprintf(report, "ready %d\n", rank);
  bagua_status_t status = BAGUA_SUCCESS;
  for (long i = 0; status == BAGUA_SUCCESS && i < 100000000; ++i)
    status = bagua_allreduce(buf.data(), buf.data(), count, BAGUA_FLOAT32, BAGUA_SUM, comm, nullptr);
  long long error_ns = now_ns();
  std::string first_error = bagua_get_last_error(comm);

  // Poisoned: every call returns the original error; queries and argument errors still answer.
  bool poison_ok = true;
  int32_t x = 0;
  bagua_request_t req = nullptr;
  bagua_status_t async = BAGUA_SUCCESS;
  poison_ok &= bagua_allreduce(&x, &x, 1, BAGUA_INT32, BAGUA_SUM, comm, nullptr) == status;
  poison_ok &= bagua_send(&x, 1, BAGUA_INT32, 0, comm, nullptr) == status;
  poison_ok &= bagua_recv(&x, 1, BAGUA_INT32, 0, comm, nullptr) == status;
  poison_ok &= bagua_barrier(comm, nullptr) == status;
  poison_ok &= bagua_iallreduce(&x, &x, 1, BAGUA_INT32, BAGUA_SUM, comm, &req) == status && req == nullptr;
  poison_ok &= bagua_comm_get_async_error(comm, &async) == BAGUA_SUCCESS && async == status;
  poison_ok &= bagua_allreduce(&x, &x, 1, BAGUA_INT32, static_cast<bagua_redop_t>(77), comm, nullptr) ==
               BAGUA_ERR_INVALID_ARGUMENT;
  poison_ok &= std::string(bagua_get_last_error(comm)).find("unusable") == std::string::npos;
  if (!poison_ok) std::fprintf(stderr, "rank %d: poisoning rules broken after: %s\n", rank, first_error.c_str());

  auto start = Clock::now();
  bagua_status_t abort_status = bagua_comm_abort(comm);
  bagua_status_t destroy_status = bagua_comm_destroy(comm);
  long long teardown_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  poison_ok &= abort_status == BAGUA_SUCCESS && destroy_status == BAGUA_SUCCESS;
  dprintf(report, "done %d %d %lld %d %lld %s\n", rank, static_cast<int>(status), error_ns, poison_ok ? 1 : 0,
          teardown_ms, first_error.substr(0, 200).c_str());
  return 0;
}

// ---- parent side ----

struct Report {
  bool ready = false;
  bool done = false;
  int status = 0;
  long long error_ns = 0;
  int poison_ok = 0;
  long long teardown_ms = 0;
  std::string message;
};

struct FailureJob {
  mp::Job job;
  std::vector<Report> reports;
  std::vector<pid_t>& pids = job.pids;
};

FailureJob launch(const mp::JobRoot& root, int nranks, size_t bytes, double timeout_s) {
  return FailureJob{mp::launch(root, "mp_failures", {std::to_string(bytes)}, nranks, timeout_s),
                    std::vector<Report>(nranks)};
}

// Reads "ready RANK" and "done RANK ..." reports until `until` returns true or the deadline passes.
template <typename Pred>
bool read_reports(FailureJob& job, double seconds, Pred until) {
  auto on_line = [&](const std::string& line) {
    int rank = -1;
    if (std::sscanf(line.c_str(), "ready %d", &rank) == 1) {
      job.reports[rank].ready = true;
      return;
    }
    Report rep;
    int consumed = 0;
    if (std::sscanf(line.c_str(), "done %d %d %lld %d %lld %n", &rank, &rep.status, &rep.error_ns, &rep.poison_ok,
                    &rep.teardown_ms, &consumed) >= 5) {
      rep.done = rep.ready = true;
      rep.message = line.substr(static_cast<size_t>(consumed));
      job.reports[rank] = rep;
    }
  };
  return mp::read_reports(job.job, seconds, on_line, until);
}

void reap(FailureJob& job) { mp::reap(job.job); }

void kill_mid_allreduce(const mp::JobRoot& root, size_t bytes, int repetitions) {
  const int nranks = 3;
  std::mt19937 rng(7);
  double worst = 0;
  for (int rep = 0; rep < repetitions; ++rep) {
    FailureJob job = launch(root, nranks, bytes, 3.0);
    bool ready = read_reports(job, 20, [&] {
      for (auto& r : job.reports)
        if (!r.ready) return false;
      return true;
    });
    EXPECT(ready, "kill %zu B rep %d: ranks never became ready", bytes, rep);
    if (!ready) {
      reap(job);
      continue;
    }
    int victim = rep % nranks;
    usleep(std::uniform_int_distribution<int>(5, 60)(rng) * 1000);
    long long kill_ns = now_ns();
    kill(job.pids[victim], SIGKILL);
    bool all_done = read_reports(job, 8, [&] {
      for (int r = 0; r < nranks; ++r)
        if (r != victim && !job.reports[r].done) return false;
      return true;
    });
    for (int r = 0; r < nranks; ++r) {
      if (r == victim) continue;
      const Report& rep_r = job.reports[r];
      EXPECT(rep_r.done, "kill %zu B rep %d: rank %d hung after rank %d was killed", bytes, rep, r, victim);
      if (!rep_r.done) continue;
      double after = (rep_r.error_ns - kill_ns) / 1e9;
      worst = std::max(worst, after);
      EXPECT(rep_r.status == BAGUA_ERR_REMOTE || rep_r.status == BAGUA_ERR_TIMEOUT,
             "kill %zu B rep %d: rank %d returned status %d: %s", bytes, rep, r, rep_r.status, rep_r.message.c_str());
      EXPECT(after <= 6.0, "kill %zu B rep %d: rank %d took %.2f s to fail", bytes, rep, r, after);
      EXPECT(rep_r.poison_ok, "kill %zu B rep %d: rank %d broke the poisoning rules", bytes, rep, r);
      EXPECT(rep_r.teardown_ms <= 2000, "kill %zu B rep %d: rank %d abort+destroy took %lld ms", bytes, rep, r,
             rep_r.teardown_ms);
    }
    (void)all_done;
    reap(job);
  }
  std::printf("SIGKILL mid-allreduce of %zu bytes, %d repetitions: slowest survivor failed %.3f s after the kill\n",
              bytes, repetitions, worst);
}

void stop_a_rank(const mp::JobRoot& root) {
  const int nranks = 3;
  const double timeout = 2.0;
  FailureJob job = launch(root, nranks, 4096, timeout);
  bool ready = read_reports(job, 20, [&] {
    for (auto& r : job.reports)
      if (!r.ready) return false;
    return true;
  });
  EXPECT(ready, "SIGSTOP: ranks never became ready");
  const int victim = 2;
  usleep(20 * 1000);
  long long stop_ns = now_ns();
  kill(job.pids[victim], SIGSTOP);
  read_reports(job, timeout + 4, [&] { return job.reports[0].done && job.reports[1].done; });
  for (int r = 0; r < 2; ++r) {
    const Report& rep = job.reports[r];
    EXPECT(rep.done, "SIGSTOP: rank %d hung", r);
    if (!rep.done) continue;
    double after = (rep.error_ns - stop_ns) / 1e9;
    std::printf("SIGSTOP: rank %d returned status %d after %.3f s: %s\n", r, rep.status, after, rep.message.c_str());
    EXPECT(rep.status == BAGUA_ERR_TIMEOUT, "SIGSTOP: rank %d returned %d, not TIMEOUT", r, rep.status);
    EXPECT(after >= 0.5 * timeout && after <= timeout + 1.0, "SIGSTOP: rank %d failed after %.3f s", r, after);
    EXPECT(rep.poison_ok, "SIGSTOP: rank %d broke the poisoning rules", r);
  }
  kill(job.pids[victim], SIGKILL);
  reap(job);
}

// Two ranks as threads: rank 1 blocks in a receive nobody will satisfy; another thread aborts it.
void abort_blocked_receive() {
  bagua_unique_id_t id;
  MP_OK(bagua_get_unique_id(&id));
  bagua_comm_t comms[2] = {nullptr, nullptr};
  std::thread t0([&] { MP_OK(bagua_comm_init_rank(&comms[0], 2, id, 0)); });
  MP_OK(bagua_comm_init_rank(&comms[1], 2, id, 1));
  t0.join();
  std::atomic<long long> returned_ns(0);
  bagua_status_t recv_status = BAGUA_SUCCESS;
  std::thread blocked([&] {
    int32_t x;
    recv_status = bagua_recv(&x, 1, BAGUA_INT32, 0, comms[1], nullptr);
    returned_ns = now_ns();
  });
  usleep(300 * 1000);
  long long abort_ns = now_ns();
  MP_OK(bagua_comm_abort(comms[1]));
  long long abort_returned_ns = now_ns();
  blocked.join();
  double wake = (returned_ns.load() - abort_ns) / 1e9;
  std::printf("abort from a second thread: blocked receive returned %s after %.3f s; abort took %.3f s\n",
              bagua_status_string(recv_status), wake, (abort_returned_ns - abort_ns) / 1e9);
  EXPECT(recv_status == BAGUA_ERR_ABORTED, "aborted receive returned %d", recv_status);
  EXPECT(wake <= 1.0, "aborted receive took %.3f s to return", wake);
  EXPECT((abort_returned_ns - abort_ns) / 1e9 <= 2.0, "abort took too long");
  // The other rank learns that its peer is gone instead of hanging.
  bagua_status_t peer_status = bagua_barrier(comms[0], nullptr);
  EXPECT(peer_status == BAGUA_ERR_REMOTE, "the aborted rank's peer got %d from barrier", peer_status);
  auto start = Clock::now();
  MP_OK(bagua_comm_destroy(comms[1]));
  MP_OK(bagua_comm_destroy(comms[0]));
  EXPECT(Clock::now() - start < std::chrono::seconds(2), "destroy after abort took too long");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--rank-main") == 0) return rank_main(std::stoul(argv[2]));
  int repetitions = argc > 1 ? std::atoi(argv[1]) : 20;

  mp::JobRoot root;  // serves the rendezvous for every job, as bagua-run does
  abort_blocked_receive();
  kill_mid_allreduce(root, 4, repetitions);
  kill_mid_allreduce(root, 4 << 20, repetitions);
  stop_a_rank(root);

  std::printf("%s\n", mp::g_failures == 0 ? "failure handling: ok" : "failure handling: FAILED");
  return mp::g_failures == 0 ? 0 : 1;
}
