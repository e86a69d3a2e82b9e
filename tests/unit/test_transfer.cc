// A Transfer destroyed while a transport still lists it as in flight (a dangling pointer the transport would later
// write through) aborts the process with a message naming it; one that is not listed goes quietly. The place in the
// list belongs to the object: copies are not listed, and assignment keeps the destination's place.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <utility>

#include "transport/transport.h"

using namespace bagua;

TEST_CASE("a transfer destroyed while listed as in flight aborts with a message", "[transport]") {
  { Transfer quiet; }  // never listed: nothing happens
  int out[2];
  REQUIRE(pipe(out) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);  // the abort is expected: no core file
    dup2(out[1], STDERR_FILENO);
    close(out[0]);
    {
      Transfer listed;
      listed.is_send = true;
      listed.peer = 3;
      listed.bytes = 4096;
      listed.pending_slot.value = 0;  // as UcxTransport's list of transfers in flight leaves it
    }
    _exit(0);  // not reached
  }
  close(out[1]);
  std::string message;
  char buf[512];
  for (ssize_t n; (n = read(out[0], buf, sizeof buf)) > 0;) message.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGABRT);
  CHECK(message.find("a send of 4096 bytes with rank 3") != std::string::npos);
  CHECK(message.find("destroyed while the transport still lists it as in flight") != std::string::npos);
}

TEST_CASE("a transfer's place in the transport's list stays with its address", "[transport]") {
  Transfer listed;
  listed.peer = 2;
  listed.pending_slot.value = 5;
  Transfer copy = listed;  // a copy is a new object: not listed
  CHECK(copy.peer == 2);
  CHECK(copy.pending_slot.value == SIZE_MAX);
  Transfer moved = std::move(copy);
  CHECK(moved.pending_slot.value == SIZE_MAX);
  listed = Transfer{};  // reused (UcxTransport::start): the fields reset, its place in the list kept
  CHECK(listed.peer == -1);
  CHECK(listed.pending_slot.value == 5);
  moved = listed;
  CHECK(moved.pending_slot.value == SIZE_MAX);
  listed.pending_slot.value = SIZE_MAX;  // as the transport leaves it once it drops the transfer
}
