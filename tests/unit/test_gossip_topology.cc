// Gossip topologies from edge lists: the refusals the fuzzer (tests/fuzz/fuzz_topology.cc) reaches.
#include <catch2/catch.hpp>

#include "algorithms/gossip/topology.h"
#include "base/error.h"

using namespace bagua;

TEST_CASE("a topology of fewer than one rank is an invalid argument (found by fuzz_topology)", "[gossip]") {
  const int src[] = {0}, dst[] = {1};
  for (int n : {0, -1, -128}) {
    try {
      Topology::from_edges(n, 1, src, dst, nullptr, true);
      FAIL("accepted " << n << " ranks");
    } catch (const Error& e) {
      CHECK(e.status() == BAGUA_ERR_INVALID_ARGUMENT);
    }
  }
  const int both_src[] = {0, 1}, both_dst[] = {1, 0};
  CHECK_NOTHROW(Topology::from_edges(2, 2, both_src, both_dst, nullptr, true));
}
