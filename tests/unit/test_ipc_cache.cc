// The IPC mapping cache's rules (core/ipc_cache.h), with opening and closing counted instead of done: a mapping is
// reused only for the same allocation (process, address and buffer id), a new buffer id at the same address closes
// the old mapping first, the least recently used closes when the cache is full, and a mapping in use closes only
// when its user lets it go. Then the stand-in's IPC, which the device tests use, on one process.
#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "core/ipc_cache.h"
#include "kernels/device_runtime.h"

using namespace bagua;

namespace {

struct Counting {
  int opened = 0;
  std::map<void*, bool> open;  // mapping -> still open
  IpcCache cache;
  explicit Counting(size_t most)
      : cache(
            most,
            [this](const IpcHandle& handle, int) {
              ++opened;
              void* p = new char[1]{static_cast<char>(handle.bytes[0])};
              open[p] = true;
              return p;
            },
            [this](void* p, int) {
              open[p] = false;
              delete[] static_cast<char*>(p);
            }) {}
  int still_open() const {
    int n = 0;
    for (auto& [p, is_open] : open) n += is_open;
    return n;
  }
};

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
  void* stale = c.cache.map(100, 0x1000, 7, handle(1), 0).get();
  auto fresh = c.cache.map(100, 0x1000, 9, handle(2), 0);
  CHECK(fresh.get() != stale);
  CHECK(*static_cast<char*>(fresh.get()) == 2);
  CHECK(c.opened == 2);
  CHECK(c.still_open() == 1);
  CHECK(c.open.at(stale) == false);
  CHECK(c.cache.size() == 1);
}

TEST_CASE("a full IPC cache closes its least recently used mapping", "[ipc_cache]") {
  Counting c(2);
  void* first = c.cache.map(100, 0x1000, 1, handle(1), 0).get();
  void* second = c.cache.map(100, 0x2000, 2, handle(2), 0).get();
  c.cache.map(100, 0x1000, 1, handle(1), 0);  // first is now the more recent
  c.cache.map(100, 0x3000, 3, handle(3), 0);
  CHECK(c.cache.size() == 2);
  CHECK(c.open.at(second) == false);
  CHECK(c.open.at(first) == true);
  CHECK(c.opened == 3);
}

TEST_CASE("an evicted IPC mapping still in use closes when its user lets it go", "[ipc_cache]") {
  Counting c(1);
  auto in_use = c.cache.map(100, 0x1000, 1, handle(1), 0);
  c.cache.map(100, 0x2000, 2, handle(2), 0);
  CHECK(c.open.at(in_use.get()) == true);
  void* p = in_use.get();
  in_use.reset();
  CHECK(c.open.at(p) == false);
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
