// Algorithm selection: the direct allreduce only where cross-memory attach works and all ranks share a
// host; BAGUA_ALGO rules that cannot run fall back to the model.
#include <catch2/catch.hpp>

#include "algorithms/selection.h"

using namespace bagua;

TEST_CASE("the direct allreduce needs cross-memory attach and one host", "[selection]") {
  const HostLayout one_host = {{0, 1}}, two_hosts = {{0, 1}, {2, 3}};
  AlgorithmSelector selector("");
  CHECK(selector.choose(Collective::kAllreduce, 16 << 20, 2, one_host) == Algorithm::kRing);
  selector.set_cross_memory(true);
  CHECK(selector.choose(Collective::kAllreduce, 16 << 20, 2, one_host) == Algorithm::kDirect);
  CHECK(selector.choose(Collective::kAllreduce, 1 << 20, 4, {{0, 1, 2, 3}}) == Algorithm::kDirect);
  CHECK(selector.choose(Collective::kAllreduce, 1024, 2, one_host) == Algorithm::kRecursiveDoubling);
  CHECK(selector.choose(Collective::kAllreduce, 16 << 20, 4, two_hosts) == Algorithm::kHierarchical);
  CHECK_FALSE(algorithm_supports(Collective::kAllreduce, Algorithm::kDirect, 4, two_hosts));
}

TEST_CASE("a forced direct allreduce falls back to the model without cross-memory attach", "[selection]") {
  const HostLayout one_host = {{0, 1}};
  AlgorithmSelector forced("allreduce:direct");
  CHECK(forced.choose(Collective::kAllreduce, 1024, 2, one_host) ==
        forced.model_choice(Collective::kAllreduce, 1024, 2, one_host));
  CHECK(forced.choose(Collective::kAllreduce, 1024, 2, one_host) != Algorithm::kDirect);
  forced.set_cross_memory(true);
  CHECK(forced.choose(Collective::kAllreduce, 1024, 2, one_host) == Algorithm::kDirect);
}
