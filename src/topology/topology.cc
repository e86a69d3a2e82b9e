#include "topology/topology.h"

#include <hwloc.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "base/env.h"
#include "base/error.h"
#include "base/logging.h"

namespace bagua {

namespace {

struct TopologyDeleter {
  void operator()(hwloc_topology* t) const { hwloc_topology_destroy(t); }
};
using TopologyPtr = std::unique_ptr<hwloc_topology, TopologyDeleter>;

// Discovery components bagua does not need. "gl" asks X servers for displays and "opencl" starts the OpenCL
// drivers: both come with libhwloc-plugins and only slow down init. hwloc 2.x offers a blacklist only.
constexpr const char* kUnneededComponents[] = {"gl", "opencl", "levelzero", "rsmi"};

// Whether hwloc can load its libxml2 plugin, which full XML (comments, entities) needs. Without it hwloc falls
// back to its built-in parser, which reads only the plain files that hwloc itself writes.
bool libxml_plugin_present() {
  for (const char* var : {"HWLOC_LIBXML_IMPORT", "HWLOC_LIBXML"})
    if (const char* v = env_get_nonempty(var)) return std::atoi(v) != 0;
  std::vector<std::string> dirs;
  if (const char* path = env_get_nonempty("HWLOC_PLUGINS_PATH")) {
    std::string rest = path;
    for (size_t colon; (colon = rest.find(':')) != std::string::npos; rest.erase(0, colon + 1))
      dirs.push_back(rest.substr(0, colon));
    dirs.push_back(rest);
  } else {
    // hwloc's default plugin folder sits beside the library: <libdir>/hwloc/.
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&hwloc_topology_init), &info) != 0 && info.dli_fname != nullptr) {
      std::string lib = info.dli_fname;
      dirs.push_back(lib.substr(0, lib.find_last_of('/') + 1) + "hwloc");
    }
  }
  for (const std::string& dir : dirs)
    if (access((dir + "/hwloc_xml_libxml.so").c_str(), R_OK) == 0) return true;
  return false;
}

[[noreturn]] void fail_on_file(const std::string& what, const std::string& xml_path, int err) {
  std::string hint;
  if (err != ENOENT && err != EACCES && !libxml_plugin_present())
    hint =
        "; hwloc's built-in XML parser reads only files written by hwloc (no comments), and its libxml plugin "
        "is missing: install libhwloc-plugins for full XML";
  fail(BAGUA_ERR_INVALID_USAGE, "{}='{}' is not a readable hwloc XML file ({}){}", what, xml_path, std::strerror(err),
       hint);
}

// `what` names where the path came from (BAGUA_TOPO_FILE or the caller) for the error message. Without `io_devices`,
// no PCI discovery (what binding needs: NUMA nodes and their cores).
TopologyPtr load(const std::string& xml_path, const char* what, bool io_devices = true) {
  hwloc_topology_t raw = nullptr;
  if (hwloc_topology_init(&raw) != 0) fail(BAGUA_ERR_SYSTEM, "hwloc_topology_init failed");
  TopologyPtr topo(raw);
  for (const char* name : kUnneededComponents)
    hwloc_topology_set_components(raw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
  // Keep the PCI devices that matter (GPUs, NICs) and the OS devices under them.
  hwloc_topology_set_io_types_filter(raw, io_devices ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT : HWLOC_TYPE_FILTER_KEEP_NONE);
  if (!xml_path.empty()) {
    // hwloc gives no reason for a failed file, so check that it opens before handing it over.
    if (access(xml_path.c_str(), R_OK) != 0) fail_on_file(what, xml_path, errno);
    if (hwloc_topology_set_xml(raw, xml_path.c_str()) != 0) fail_on_file(what, xml_path, errno);
    errno = 0;
    if (hwloc_topology_load(raw) != 0) fail_on_file(what, xml_path, errno != 0 ? errno : EINVAL);
    return topo;
  }
  if (hwloc_topology_load(raw) != 0)
    fail(BAGUA_ERR_SYSTEM, "hwloc could not load the topology: {}", std::strerror(errno));
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
  TopologyPtr topo = load(path, "topology file");
  return summarize(topo.get(), path);
}

MachineTopology MachineTopology::detect() {
  const char* file = env_get("BAGUA_TOPO_FILE");
  std::string path = file && *file ? file : "";
  TopologyPtr topo = load(path, "BAGUA_TOPO_FILE");
  return summarize(topo.get(), path.empty() ? "this machine" : path);
}

std::string MachineTopology::describe() const {
  std::string out = fmt::format("{}: {} package(s), {} NUMA node(s), {} core(s), {} hardware thread(s)\n", source,
                                packages, numa_nodes, cores, hardware_threads);
  if (devices.empty()) out += "  no PCI GPUs or NICs reported\n";
  for (const Device& d : devices)
    out += fmt::format("  {:<4} {:<12} pci {:<13} NUMA node {}\n", d.kind, d.name, d.pci_bus.empty() ? "-" : d.pci_bus,
                       d.numa_node < 0 ? std::string("?") : std::to_string(d.numa_node));
  return out;
}

int bind_to_numa_node(int node) {
  if (env_get_nonempty("BAGUA_TOPO_FILE")) {
    BAGUA_WARN("BAGUA_BIND=1 ignored: BAGUA_TOPO_FILE describes another machine");
    return -1;
  }
  // No PCI discovery: a second one in a process leaked memory inside hwloc's PCI plugin (LeakSanitizer, whose stack
  // then ends in the unloaded plugin), and binding needs none of it.
  TopologyPtr topo = load("", "", false);
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
