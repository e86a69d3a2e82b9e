// The device data path's machinery (docs/cuda.md). A device call is a host operation on pinned staging memory,
// wrapped in a DeviceOperation that orders it against the user's stream:
//   user stream:  [earlier work] [input event] [gate: wait until the proxy releases it] [later work]
//   proxy:        input event done -> copy in (device -> staging) -> host operation -> copy out -> release gate
// Each communicator has one DeviceProxy: a thread that drives its device operations, the staging pool (capped by
// BAGUA_DEVICE_MEMORY_LIMIT) and the host-mapped words that gate user streams. Failure or abort completes every
// enqueued operation (its output undefined) and releases its stream.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/operation.h"
#include "kernels/device_runtime.h"

namespace bagua {

class Comm;
class DeviceProxy;

// A block of the staging pool, returned to it on destruction.
class StagingLease {
 public:
  StagingLease() = default;
  StagingLease(DeviceProxy* pool, void* ptr, size_t bytes) : pool_(pool), ptr_(ptr), bytes_(bytes) {}
  StagingLease(StagingLease&& other) noexcept { *this = std::move(other); }
  StagingLease& operator=(StagingLease&& other) noexcept;
  ~StagingLease() { reset(); }
  void reset();
  unsigned char* data() const { return static_cast<unsigned char*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  DeviceProxy* pool_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A user stream parked on a host-mapped word until release(); released on destruction at the latest.
class StreamGate {
 public:
  StreamGate() = default;
  StreamGate(DeviceProxy* owner, uint32_t slot, uint32_t value) : owner_(owner), slot_(slot), value_(value) {}
  StreamGate(StreamGate&& other) noexcept { *this = std::move(other); }
  StreamGate& operator=(StreamGate&& other) noexcept;
  ~StreamGate() { release(); }
  void release();

 private:
  DeviceProxy* owner_ = nullptr;
  uint32_t slot_ = 0;
  uint32_t value_ = 0;
};

struct DeviceCopy {
  void* dst;
  const void* src;
  size_t bytes;
};

class DeviceOperation final : public Operation {
 public:
  DeviceOperation(bagua_opkind_t kind, DeviceProxy& proxy, DeviceStream stream, int device, StagingLease staging);
  ~DeviceOperation() override;

  unsigned char* staging() const { return staging_.data(); }
  void copy_in(void* stage, const void* device_src, size_t bytes) { copies_in_.push_back({stage, device_src, bytes}); }
  void copy_out(void* device_dst, const void* stage, size_t bytes) {
    copies_out_.push_back({device_dst, stage, bytes});
  }
  // The user's stream position this operation starts after, and the gate that holds the stream's later work
  // until it ends. Operations of one group on one stream share both (DeviceProxy::submit_group).
  void set_gate(std::shared_ptr<DeviceEvent> input_ready, std::shared_ptr<StreamGate> gate);
  bool gated() const { return gate_ != nullptr; }
  // The host operation on the staging memory, built once the input is there; the sequence number is already taken.
  void set_host_operation(std::function<std::unique_ptr<Operation>()> build, std::string description);

  void advance(Transport& transport) override;
  bool on_device() const override { return true; }
  std::string waiting_for() const override;
  // No copy of this operation is in flight (its staging memory is free to reuse).
  bool quiescent();
  DeviceStream stream() const { return stream_; }

 private:
  enum class Phase { kWaitInput, kCopyIn, kRun, kCopyOut, kDone };
  void issue(const std::vector<DeviceCopy>& copies);

  DeviceProxy& proxy_;
  DeviceStream stream_;
  int device_;
  StagingLease staging_;
  std::shared_ptr<StreamGate> gate_;
  std::shared_ptr<DeviceEvent> input_ready_;
  std::unique_ptr<DeviceEvent> copies_done_;
  std::vector<DeviceCopy> copies_in_, copies_out_;
  std::function<std::unique_ptr<Operation>()> build_;
  std::unique_ptr<Operation> host_op_;
  Phase phase_ = Phase::kWaitInput;
  uint64_t host_events_ = 0, host_bytes_ = 0;
};

// What a non-blocking device call's request waits for: the device operation's end (its stream work included).
struct DeviceCompletion {
  std::atomic<bool> done{false};
  bagua_status_t status = BAGUA_SUCCESS;
  std::string error;  // written before done is set
};

class DeviceProxy {
 public:
  explicit DeviceProxy(Comm& comm);
  // Waits up to the timeout for operations in flight, aborts the communicator if some remain, then stops.
  ~DeviceProxy();

  Comm& comm() const { return comm_; }
  DeviceRuntime& runtime() const { return runtime_; }

  // Refuses a stream that is being captured, or that another rank of this communicator in this process has
  // work on (thread ranks need a stream each). No side effect.
  void check_stream(DeviceStream stream) const;
  // A staging block of `bytes`; waits for operations in flight to return theirs, up to the timeout.
  StagingLease lease(size_t bytes);
  // Records the stream's position and parks its later work on a fresh gate.
  std::pair<std::shared_ptr<DeviceEvent>, std::shared_ptr<StreamGate>> gate(DeviceStream stream);
  // The library's copy stream on `device`.
  DeviceStream copy_stream(int device);
  // Gates the stream, starts the operation and hands it to the proxy thread; `completion`, when given, learns its
  // end. The sequence number is already taken, so a failure here poisons the communicator.
  void submit(std::unique_ptr<DeviceOperation> op, std::shared_ptr<DeviceCompletion> completion = nullptr);
  // The device operations of one bagua_group_start/end on this communicator: those on one stream start together
  // and release it together, so that sends and receives among them cannot wait on each other.
  void submit_group(std::vector<std::unique_ptr<DeviceOperation>> ops);
  size_t in_flight();

 private:
  friend class StagingLease;
  friend class StreamGate;
  struct Entry {
    std::unique_ptr<DeviceOperation> op;
    std::shared_ptr<DeviceCompletion> completion;
  };
  void run();
  void finish(Entry& entry, bagua_status_t status, const std::string& error);
  void give_back(void* ptr, size_t bytes);
  void release_slot(uint32_t slot, uint32_t value);

  Comm& comm_;
  DeviceRuntime& runtime_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Entry> entries_;
  bool stopping_ = false;
  // Staging pool.
  std::multimap<size_t, void*> free_blocks_;
  size_t pool_bytes_ = 0;  // allocated, free or leased
  size_t leased_bytes_ = 0;
  // Gate words: pages of host-mapped memory, a generation per slot.
  std::vector<uint32_t*> gate_pages_;
  std::vector<uint32_t> gate_generation_;
  std::vector<uint32_t> free_slots_;
  std::map<int, DeviceStream> copy_streams_;
  std::thread thread_;
};

}  // namespace bagua
