// Topology: hwloc detection from an XML file (a made-up 2-socket machine with a GPU and a NIC), the real
// machine, binding, and host identity / local rank placement.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "core/error.h"
#include "topology/host_identity.h"
#include "topology/topology.h"

using namespace bagua;

namespace {
const std::string kXml = std::string(BAGUA_TEST_DATA_DIR) + "/two_numa_gpu_nic.xml";
}

TEST_CASE("an hwloc XML file stands in for the machine", "[topology]") {
  MachineTopology t = MachineTopology::from_xml(kXml);
  CHECK_FALSE(t.this_system);
  CHECK(t.packages == 2);
  CHECK(t.numa_nodes == 2);
  CHECK(t.cores == 4);
  CHECK(t.hardware_threads == 4);
  REQUIRE(t.devices.size() == 3);
  CHECK(t.devices[0].kind == "GPU");
  CHECK(t.devices[0].name == "cuda0");
  CHECK(t.devices[0].pci_bus == "0000:3b:00.0");
  CHECK(t.devices[0].numa_node == 0);
  CHECK(t.devices[1].kind == "NIC");
  CHECK(t.devices[1].numa_node == 1);
  CHECK_THAT(t.describe(), Catch::Contains("cuda0") && Catch::Contains("NUMA node 1"));
}

TEST_CASE("BAGUA_TOPO_FILE is honoured and checked", "[topology]") {
  setenv("BAGUA_TOPO_FILE", kXml.c_str(), 1);
  CHECK(MachineTopology::detect().numa_nodes == 2);
  CHECK(bind_to_numa_node(0) == -1);  // never bind to a machine we are not on
  setenv("BAGUA_TOPO_FILE", "/no/such/file.xml", 1);
  try {
    MachineTopology::detect();
    FAIL("an unreadable topology file was accepted");
  } catch (const Error& e) {
    CHECK(e.status() == BAGUA_ERR_INVALID_USAGE);
    CHECK_THAT(e.what(), Catch::Contains("BAGUA_TOPO_FILE"));
  }
  unsetenv("BAGUA_TOPO_FILE");
}

TEST_CASE("the real machine has at least one NUMA node and core; binding works", "[topology]") {
  MachineTopology t = MachineTopology::detect();
  CHECK(t.this_system);
  CHECK(t.numa_nodes >= 1);
  CHECK(t.cores >= 1);
  CHECK(bind_to_numa_node(0) == 0);
}

TEST_CASE("host identity: boot id + IPC namespace, or BAGUA_HOST_ID", "[topology]") {
  unsetenv("BAGUA_HOST_ID");
  std::string id = detect_host_id();
  CHECK_THAT(id, Catch::Contains("/ipc:"));
  setenv("BAGUA_HOST_ID", "rack3-node7", 1);
  CHECK(detect_host_id() == "rack3-node7");
  unsetenv("BAGUA_HOST_ID");
}

TEST_CASE("local ranks and host numbering from host ids", "[topology]") {
  // 3 ranks on host a, 1 on b, interleaved.
  std::vector<std::string> ids = {"a", "b", "a", "a"};
  LocalPlacement p0 = place_rank(ids, 0), p1 = place_rank(ids, 1), p3 = place_rank(ids, 3);
  CHECK(p0.local_rank == 0);
  CHECK(p0.local_size == 3);
  CHECK(p0.host_index == 0);
  CHECK(p0.nhosts == 2);
  CHECK(p1.local_rank == 0);
  CHECK(p1.local_size == 1);
  CHECK(p1.host_index == 1);
  CHECK(p3.local_rank == 2);
}
