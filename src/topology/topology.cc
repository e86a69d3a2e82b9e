#include "topology/topology.h"

#include <hwloc.h>

#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "core/logging.h"

namespace bagua {

namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

TopologyPtr load(const std::string& xml_path) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) fail(BAGUA_ERR_SYSTEM, "hwloc_topology_init failed");
  TopologyPtr topo(raw);
  // Keep the PCI devices that matter (GPUs, NICs) and the OS devices under them.
  hwloc_topology_set_io_types_filter(raw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (!xml_path.empty() && hwloc_topology_set_xml(raw, xml_path.c_str()) != 0)
    fail(BAGUA_ERR_INVALID_USAGE, "BAGUA_TOPO_FILE='{}' is not a readable hwloc XML file", xml_path);
  if (hwloc_topology_load(raw) != 0) fail(BAGUA_ERR_SYSTEM, "hwloc could not load the topology");
  return topo;
}

int numa_node_of(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t ancestor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (ancestor == nullptr || ancestor->nodeset == nullptr) return -1;
  int os_index = hwloc_bitmap_first(ancestor->nodeset);
  if (os_index < 0) return -1;
  hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(topo, static_cast<unsigned>(os_index));
  return node ? static_cast<int>(node->logical_index) : -1;
}

MachineTopology summarize(hwloc_topology_t topo, const std::string& source) {
  MachineTopology t;
  t.source = source;
  t.this_system = hwloc_topology_is_thissystem(topo) != 0;
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.numa_nodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  t.hardware_threads = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  for (hwloc_obj_t os = hwloc_get_next_osdev(topo, nullptr); os != nullptr; os = hwloc_get_next_osdev(topo, os)) {
    const char* kind = nullptr;
    switch (os->attr->osdev.type) {
      case HWLOC_OBJ_OSDEV_GPU:
      case HWLOC_OBJ_OSDEV_COPROC: kind = "GPU"; break;
      case HWLOC_OBJ_OSDEV_NETWORK:
      case HWLOC_OBJ_OSDEV_OPENFABRICS: kind = "NIC"; break;
      default: continue;
    }
    MachineTopology::Device d;
    d.kind = kind;
    d.name = os->name ? os->name : "?";
    d.numa_node = numa_node_of(topo, os);
    for (hwloc_obj_t p = os->parent; p != nullptr; p = p->parent) {
      if (p->type != HWLOC_OBJ_PCI_DEVICE) continue;
      const auto& pci = p->attr->pcidev;
      d.pci_bus = fmt::format("{:04x}:{:02x}:{:02x}.{:x}", pci.domain, pci.bus, pci.dev, pci.func);
      break;
    }
    t.devices.push_back(std::move(d));
  }
  return t;
}

}  // namespace

MachineTopology MachineTopology::from_xml(const std::string& path) {
  TopologyPtr topo = load(path);
  return summarize(topo.get(), path);
}

MachineTopology MachineTopology::detect() {
  const char* file = std::getenv("BAGUA_TOPO_FILE");
  std::string path = file && *file ? file : "";
  TopologyPtr topo = load(path);
  return summarize(topo.get(), path.empty() ? "this machine" : path);
}

std::string MachineTopology::describe() const {
  std::string out = fmt::format("{}: {} package(s), {} NUMA node(s), {} core(s), {} hardware thread(s)\n", source,
                                packages, numa_nodes, cores, hardware_threads);
  if (devices.empty()) out += "  no PCI GPUs or NICs reported\n";
  for (const Device& d : devices)
    out += fmt::format("  {:<4} {:<12} pci {:<13} NUMA node {}\n", d.kind, d.name,
                       d.pci_bus.empty() ? "-" : d.pci_bus, d.numa_node < 0 ? std::string("?") : std::to_string(d.numa_node));
  return out;
}

int bind_to_numa_node(int node) {
  if (const char* file = std::getenv("BAGUA_TOPO_FILE"); file && *file) {
    BAGUA_WARN("BAGUA_BIND=1 ignored: BAGUA_TOPO_FILE describes another machine");
    return -1;
  }
  TopologyPtr topo = load("");
  int nodes = hwloc_get_nbobjs_by_type(topo.get(), HWLOC_OBJ_NUMANODE);
  if (nodes <= 0) return -1;
  hwloc_obj_t obj = hwloc_get_obj_by_type(topo.get(), HWLOC_OBJ_NUMANODE, static_cast<unsigned>(node % nodes));
  if (obj == nullptr || obj->cpuset == nullptr) return -1;
  if (hwloc_set_cpubind(topo.get(), obj->cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
    BAGUA_WARN("BAGUA_BIND=1: could not bind to NUMA node {}", obj->logical_index);
    return -1;
  }
  hwloc_set_membind(topo.get(), obj->nodeset, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET);
  return static_cast<int>(obj->logical_index);
}

}  // namespace bagua
