// The machine as hwloc sees it (or as BAGUA_TOPO_FILE describes it): NUMA nodes, cores, and the PCI GPUs and
// NICs with the NUMA node each hangs off. BAGUA_BIND=1 binds a rank's threads to one NUMA node.
#pragma once

#include <string>
#include <vector>

namespace bagua {

struct MachineTopology {
  struct Device {
    std::string kind;     // "GPU" or "NIC"
    std::string name;     // OS name: cuda0, eth0, mlx5_0, ...
    std::string pci_bus;  // "0000:3b:00.0", or empty
    int numa_node = -1;   // logical index of the closest NUMA node, -1 if unknown
  };
  std::string source;  // "this machine" or the XML file
  bool this_system = true;
  int packages = 0;
  int numa_nodes = 0;
  int cores = 0;
  int hardware_threads = 0;
  std::vector<Device> devices;

  // Reads BAGUA_TOPO_FILE when set. Throws INVALID_USAGE for an unreadable file, SYSTEM when hwloc fails.
  static MachineTopology detect();
  static MachineTopology from_xml(const std::string& path);
  std::string describe() const;
};

// Binds every thread of this process to the cores of NUMA node `node % numa_nodes` (this machine only).
// Returns the node used, or -1 when binding is not possible (a topology file, one node, an hwloc error).
int bind_to_numa_node(int node);

}  // namespace bagua
