// The IPC mapping cache's rules (core/ipc_cache.h), with opening and closing counted instead of done: a mapping is
// reused only for the same allocation (process, address and buffer id), a new buffer id at the same address closes
// the old mapping first, the least recently used closes when the cache is full, and a mapping in use closes only
// when its user lets it go. Then the stand-in's IPC, which the device tests use, on one process.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/ipc_cache.h"
#include "kernels/device_runtime.h"

using namespace bagua;

namespace {

// Mappings are identified by their handle's tag (the byte they hold): addresses of closed ones get reused.
struct Counting {
  int opened = 0;
  std::vector<int> closed;  // tags, in closing order
  IpcCache cache;
  explicit Counting(size_t most)
      : cache(
            most,
            [this](const IpcHandle& handle, int) {
              ++opened;
              return static_cast<void*>(new char[1]{static_cast<char>(handle.bytes[0])});
            },
            [this](void* p, int) {
              closed.push_back(*static_cast<char*>(p));
              delete[] static_cast<char*>(p);
            }) {}
  bool was_closed(int tag) const { return std::find(closed.begin(), closed.end(), tag) != closed.end(); }
};

int tag_of(const std::shared_ptr<void>& mapping) { return *static_cast<char*>(mapping.get()); }

IpcHandle handle(uint8_t tag) {
  IpcHandle h{};
  h.bytes[0] = tag;
  return h;
}

}  // namespace

TEST_CASE("an IPC mapping is reused for the same allocation only", "[ipc_cache]") {
  Counting c(8);
  auto a = c.cache.map(100, 0x1000, 7, handle(1), 0);
  auto again = c.cache.map(100, 0x1000, 7, handle(1), 0);
  CHECK(a == again);
  CHECK(c.closed.empty());
  CHECK(c.opened == 1);
  // Another process, another address or another device: other mappings.
  c.cache.map(101, 0x1000, 7, handle(2), 0);
  c.cache.map(100, 0x2000, 8, handle(3), 0);
  c.cache.map(100, 0x1000, 7, handle(1), 1);
  CHECK(c.opened == 4);
  CHECK(c.cache.opened() == 4);
}

TEST_CASE("a new allocation at a freed one's address is mapped afresh and the stale mapping closed", "[ipc_cache]") {
  Counting c(8);
  c.cache.map(100, 0x1000, 7, handle(1), 0);
  auto fresh = c.cache.map(100, 0x1000, 9, handle(2), 0);
  CHECK(tag_of(fresh) == 2);
  CHECK(c.opened == 2);
  CHECK(c.closed == std::vector<int>{1});
  CHECK(c.cache.size() == 1);
}

TEST_CASE("a full IPC cache closes its least recently used mapping", "[ipc_cache]") {
  Counting c(2);
  c.cache.map(100, 0x1000, 1, handle(1), 0);
  c.cache.map(100, 0x2000, 2, handle(2), 0);
  c.cache.map(100, 0x1000, 1, handle(1), 0);  // the first is now the more recent
  c.cache.map(100, 0x3000, 3, handle(3), 0);
  CHECK(c.cache.size() == 2);
  CHECK(c.closed == std::vector<int>{2});
  CHECK(c.opened == 3);
}

TEST_CASE("an evicted IPC mapping still in use closes when its user lets it go", "[ipc_cache]") {
  Counting c(1);
  auto in_use = c.cache.map(100, 0x1000, 1, handle(1), 0);
  c.cache.map(100, 0x2000, 2, handle(2), 0);
  CHECK_FALSE(c.was_closed(1));
  in_use.reset();
  CHECK(c.was_closed(1));
}

TEST_CASE("the stand-in's allocations: buffer ids, export and mapping", "[.][device_path]") {
  DeviceRuntime& rt = device_runtime();
  REQUIRE(std::string(rt.name()) == "host stand-in");
  auto* dev = static_cast<unsigned char*>(rt.alloc_device(10000, 0));
  REQUIRE(dev != nullptr);
  DeviceAllocation alloc;
  REQUIRE(rt.allocation(dev + 5000, &alloc));
  CHECK(alloc.base == reinterpret_cast<uintptr_t>(dev));
  CHECK(alloc.bytes == 10000);
  CHECK(alloc.exportable);
  CHECK_FALSE(rt.allocation(dev + 10000, &alloc));
  REQUIRE(rt.allocation(dev, &alloc));
  IpcHandle h;
  rt.export_ipc(alloc.base, &h);
  auto* mapped = static_cast<unsigned char*>(rt.open_ipc(h, 0));
  REQUIRE(mapped != nullptr);
  CHECK(mapped != dev);
  std::memset(dev, 0x5a, 10000);
  CHECK(mapped[9999] == 0x5a);  // the same memory
  mapped[0] = 1;
  CHECK(dev[0] == 1);
  rt.close_ipc(mapped, 0);
  const uint64_t id = alloc.buffer_id;
  rt.free_device(dev);
  auto* again = static_cast<unsigned char*>(rt.alloc_device(10000, 0));
  REQUIRE(rt.allocation(again, &alloc));
  CHECK(alloc.buffer_id != id);  // also when the address is the same
  rt.free_device(again);
  REQUIRE(standin_control() != nullptr);
  void* pooled = standin_control()->alloc_unexportable(4096);
  REQUIRE(rt.allocation(pooled, &alloc));
  CHECK_FALSE(alloc.exportable);
  rt.free_device(pooled);
}

// The IPC path on the caller's stream (core/ipc_cache.h, CallerIpcMappings): the proxy thread finds or asks, a
// calling thread opens; a mapping let go (a new buffer id at its address, eviction) is closed only by a calling thread
// allowed to close, and one still in use only once its user lets it go. Oracle: the stand-in's mappings are the
// allocation's memory; counts of opens and pending closes.
TEST_CASE("mappings for the caller's stream are opened and closed by calling threads", "[.][device_path]") {
  DeviceRuntime& rt = device_runtime();
  REQUIRE(std::string(rt.name()) == "host stand-in");
  CallerIpcMappings mappings(rt, 2);
  auto* dev = static_cast<unsigned char*>(rt.alloc_device(4096, 0));
  DeviceAllocation alloc;
  REQUIRE(rt.allocation(dev, &alloc));
  IpcHandle h;
  rt.export_ipc(alloc.base, &h);
  CHECK(mappings.find(7, alloc.base, alloc.buffer_id, 0) == nullptr);
  mappings.request(7, alloc.base, alloc.buffer_id, h, 0);
  mappings.request(7, alloc.base, alloc.buffer_id, h, 0);  // asked twice, opened once
  CHECK(mappings.find(7, alloc.base, alloc.buffer_id, 0) == nullptr);
  mappings.open_requested([] { return true; });
  CHECK(mappings.opened() == 1);
  std::shared_ptr<void> found = mappings.find(7, alloc.base, alloc.buffer_id, 0);
  REQUIRE(found != nullptr);
  dev[100] = 42;
  CHECK(static_cast<unsigned char*>(found.get())[100] == 42);
  // Another buffer id at the same address: not this mapping; opening it lets the old one go, which stays open while
  // `found` holds it, and then waits for a thread allowed to close.
  CHECK(mappings.find(7, alloc.base, alloc.buffer_id + 1, 0) == nullptr);
  mappings.request(7, alloc.base, alloc.buffer_id + 1, h, 0);
  mappings.open_requested([] { return false; });
  CHECK(mappings.opened() == 2);
  CHECK(mappings.pending_closes() == 0);
  found.reset();
  CHECK(mappings.pending_closes() == 1);
  mappings.open_requested([] { return false; });
  CHECK(mappings.pending_closes() == 1);
  mappings.open_requested([] { return true; });
  CHECK(mappings.pending_closes() == 0);
  // Eviction (two entries at most): the least recently used goes.
  mappings.request(8, alloc.base, alloc.buffer_id, h, 0);
  mappings.request(9, alloc.base, alloc.buffer_id, h, 0);
  mappings.open_requested([] { return true; });
  CHECK(mappings.opened() == 4);
  CHECK(mappings.find(7, alloc.base, alloc.buffer_id + 1, 0) == nullptr);
  CHECK(mappings.find(8, alloc.base, alloc.buffer_id, 0) != nullptr);
  CHECK(mappings.find(9, alloc.base, alloc.buffer_id, 0) != nullptr);
  rt.free_device(dev);
}
