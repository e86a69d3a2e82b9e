// The flight recorder's ring: the last N operations kept in order, states and what a failed one waited for,
// the summary by algorithm, the log's short form, and recording switched off.
#include <catch2/catch.hpp>

#include <sstream>
#include <string>
#include <vector>

#include "core/flight_recorder.h"

using namespace bagua;

namespace {
std::vector<std::string> op_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("op ", 0) == 0) lines.push_back(line);
  return lines;
}
}  // namespace

TEST_CASE("the flight recorder keeps the last N operations, oldest first", "[flight_recorder]") {
  FlightRecorder r;
  r.set_capacity(3);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(r.begin(BAGUA_OPKIND_ALLREDUCE, "allreduce #" + std::to_string(i)));
  CHECK(ids == std::vector<uint64_t>{1, 2, 3, 4, 5});
  r.end(ids[2], FlightRecorder::State::kDone, BAGUA_SUCCESS, {}, "allreduce", "ring");
  r.end(ids[3], FlightRecorder::State::kFailed, BAGUA_ERR_TIMEOUT, "receive of 40 bytes from rank 1");
  r.end(ids[0], FlightRecorder::State::kDone, BAGUA_SUCCESS);  // overwritten: ignored
  r.note_waiting(ids[4], "send of 8 bytes to rank 2 | x\nsplit");
  std::string text = r.dump("comm 0x1 rank 0 of 2; test");
  CHECK(text.rfind("# comm 0x1 rank 0 of 2; test\n# 5 operations recorded, the last 3 kept, 3 shown\n", 0) == 0);
  CHECK(text.find("# completed by algorithm: allreduce ring 1\n") != std::string::npos);
  auto lines = op_lines(text);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0].rfind("op 3 D 0 ", 0) == 0);
  CHECK(lines[0].find(" allreduce #2 | ") != std::string::npos);
  CHECK(lines[1].rfind("op 4 F -6 ", 0) == 0);
  CHECK(lines[1].find("allreduce #3 | receive of 40 bytes from rank 1") != std::string::npos);
  CHECK(lines[2].rfind("op 5 R 0 ", 0) == 0);
  CHECK(lines[2].find(" - allreduce #4 | send of 8 bytes to rank 2   x split") != std::string::npos);  // one line
  auto tail = op_lines(r.tail("h", 1));
  REQUIRE(tail.size() == 1);
  CHECK(tail[0].rfind("op 5 ", 0) == 0);
}

TEST_CASE("a cleared flight recorder starts again at id 1 with nothing kept", "[flight_recorder]") {
  FlightRecorder r;
  r.set_capacity(4);
  for (int i = 0; i < 3; ++i)
    r.end(r.begin(BAGUA_OPKIND_ALLTOALL, "alltoall #" + std::to_string(4093 + i)), FlightRecorder::State::kDone,
          BAGUA_SUCCESS, {}, "alltoall", "shm");
  r.clear();
  CHECK(op_lines(r.dump("h")).empty());
  CHECK(r.dump("h").find("completed by algorithm") == std::string::npos);
  CHECK(r.begin(BAGUA_OPKIND_ALLREDUCE, "allreduce #0") == 1);
  auto lines = op_lines(r.dump("h"));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find("allreduce #0") != std::string::npos);
}

TEST_CASE("a flight recorder of capacity 0 records nothing", "[flight_recorder]") {
  FlightRecorder r;
  r.set_capacity(0);
  CHECK(r.begin(BAGUA_OPKIND_SEND, "send #0") == 0);
  r.end(0, FlightRecorder::State::kDone, BAGUA_SUCCESS);
  CHECK(op_lines(r.dump("h")).empty());
  CHECK(r.dump("h").find("0 operations recorded") != std::string::npos);
}
