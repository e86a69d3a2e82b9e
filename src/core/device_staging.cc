// The device proxy's staging memory (core/device_proxy.h): leases under BAGUA_DEVICE_MEMORY_LIMIT and the pool of
// pinned blocks, the blocks that come back once a stream has copied out of them (drains), and the completion of
// requests staged on their caller's stream. The proxy thread, its gates and stream claims are in device_proxy.cc.
#include <algorithm>
#include <chrono>
#include <optional>

#include "base/error.h"
#include "core/comm.h"
#include "core/device_proxy.h"

namespace bagua {

size_t DeviceProxy::check_staging_limit(size_t bytes) const {
  bytes = std::max<size_t>((bytes + 255) & ~size_t{255}, 256);
  const size_t limit = comm_.config().device_memory_limit;
  if (bytes > limit)
    fail(BAGUA_ERR_SYSTEM,
         "a device call needs {} bytes of staging memory, more than BAGUA_DEVICE_MEMORY_LIMIT ({} bytes) allows", bytes,
         limit);
  return bytes;
}

StagingLease DeviceProxy::lease(size_t bytes, bool reuse_idle) {
  bytes = check_staging_limit(bytes);
  const size_t limit = comm_.config().device_memory_limit;
  const auto timeout = std::chrono::milliseconds(comm_.config().timeout_ms);
  // Pushed back whenever the operations holding staging progress (staging_progress_), so a call behind a long one
  // waits as long as that one moves; looked at least every quarter of the timeout.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto look = std::max<std::chrono::steady_clock::duration>(timeout / 4, std::chrono::milliseconds(1));
  // How long a call without room leaves a fitting idle block to the operations that have yet to start.
  constexpr auto kIdleBlockWait = std::chrono::seconds(2);
  std::optional<std::chrono::steady_clock::time_point> idle_block_deadline;
  drain(false);  // blocks of calls whose streams have copied their output back
  std::unique_lock<std::mutex> lock(mutex_);
  uint64_t progress = staging_progress_.load();
  for (;;) {
    if (comm_.poisoned()) {  // its operations end: report why, not the staging
      lock.unlock();
      comm_.check_usable();
    }
    if (const uint64_t now_progress = staging_progress_.load(); now_progress != progress) {
      progress = now_progress;
      deadline = std::max(deadline, std::chrono::steady_clock::now() + timeout);
    }
    if (pool_bytes_ + kept_bytes_ + bytes <= limit) {
      kept_bytes_ += bytes;
      leased_bytes_ += bytes;
      return StagingLease(this, nullptr, bytes);
    }
    // No room: an idle block that fits is this call's once no submitted operation of ours waits to start (one that
    // starts may take it, and free its room for this call), or kIdleBlockWait after the call first saw it (such an
    // operation may wait for a peer that waits for this call).
    auto fitting = fitting_idle_block(bytes);
    const bool fits = reuse_idle && fitting != free_blocks_.end();
    if (fits) {
      const auto now = std::chrono::steady_clock::now();
      if (!idle_block_deadline) idle_block_deadline = std::min(deadline, now + kIdleBlockWait);
      if (unstarted_ == 0 || now >= *idle_block_deadline) {
        StagingLease lease(this, fitting->second, fitting->first);
        leased_bytes_ += fitting->first;
        free_blocks_.erase(fitting);
        return lease;
      }
    }
    const bool idle_blocks = !free_blocks_.empty();
    if (idle_blocks && !gates_parked_anywhere()) {
      // Idle blocks of other sizes fill the limit and no stream of the process waits on a gate: free them (outside
      // the lock; freeing pinned memory waits for the device), all but the fitting one. Leases of calls in an open
      // group do not stand in the way: their streams are parked only when the group ends.
      std::multimap<size_t, void*> victims;
      for (auto block = free_blocks_.begin(); block != free_blocks_.end();) {
        if (fits && block == fitting) {
          ++block;
          continue;
        }
        victims.emplace(block->first, block->second);
        pool_bytes_ -= block->first;
        block = free_blocks_.erase(block);
      }
      if (!victims.empty()) {
        lock.unlock();
        retire_pinned(std::move(victims));
        lock.lock();
        continue;
      }
    }
    const bool draining = draining_bytes_.load() != 0;  // blocks that come back once streams have copied out
    if (submitted_bytes_ == 0 && !draining && !idle_blocks)
      fail(BAGUA_ERR_SYSTEM,
           "a device call needs {} bytes of staging memory, but calls not yet enqueued (in an open group) hold {} "
           "of BAGUA_DEVICE_MEMORY_LIMIT = {} bytes",
           bytes, leased_bytes_, limit);
    // Our operations hand staging back with a notification; other communicators' gates are polled.
    const auto poll = draining ? std::chrono::milliseconds(1) : std::chrono::milliseconds(10);
    const auto wake = std::min(deadline, std::chrono::steady_clock::now() + (idle_blocks || draining ? poll : look));
    changed_.wait_until(lock, wake);
    if (draining) {
      lock.unlock();
      drain(false);
      lock.lock();
    }
    if (std::chrono::steady_clock::now() >= deadline && staging_progress_.load() == progress && !comm_.poisoned()) {
      size_t idle_bytes = 0;
      for (const auto& block : free_blocks_) idle_bytes += block.first;
      fail(BAGUA_ERR_TIMEOUT,
           "a device call waited for {} bytes of staging memory while the operations in flight made no progress "
           "for {:.1f} s (BAGUA_TIMEOUT); they hold {} of BAGUA_DEVICE_MEMORY_LIMIT = {} bytes (submitted {}, {} "
           "not started), {} idle blocks {} bytes{}, {} draining",
           bytes, comm_.config().timeout_ms / 1000.0, leased_bytes_, limit, submitted_bytes_, unstarted_,
           free_blocks_.size(), idle_bytes, gates_parked_anywhere() ? " (kept: a stream waits at a gate)" : "",
           draining_bytes_.load());
    }
  }
}

std::multimap<size_t, void*>::iterator DeviceProxy::fitting_idle_block(size_t bytes) {
  auto it = free_blocks_.lower_bound(bytes);  // the smallest that holds it, and at most twice its size
  return it != free_blocks_.end() && it->first <= 2 * bytes ? it : free_blocks_.end();
}

void DeviceProxy::fill(StagingLease& lease) {
  if (lease.ptr_ != nullptr || lease.bytes_ == 0) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kept_bytes_ -= lease.bytes_;
    changed_.notify_all();
    auto it = fitting_idle_block(lease.bytes_);
    if (it != free_blocks_.end()) {
      // An idle block instead of the room; the operation (submitted) now holds the block's size.
      const size_t grown = it->first - lease.bytes_;
      leased_bytes_ += grown;
      submitted_bytes_ += grown;
      lease.ptr_ = it->second;
      lease.bytes_ = it->first;
      free_blocks_.erase(it);
      return;
    }
    pool_bytes_ += lease.bytes_;  // within the limit: the room was kept
  }
  if (auto [block, bytes] = take_unfreed_block(lease.bytes_); block != nullptr) {  // one another call let go
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t grown = bytes - lease.bytes_;
    pool_bytes_ += grown;
    leased_bytes_ += grown;
    submitted_bytes_ += grown;
    lease.ptr_ = block;
    lease.bytes_ = bytes;
    return;
  }
  void* p = nullptr;
  try {
    p = runtime_.alloc_mapped(lease.bytes_);
  } catch (...) {
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (p == nullptr) {
    pool_bytes_ -= lease.bytes_;
    kept_bytes_ += lease.bytes_;  // the lease still holds its room; its reset gives it back
    fail(BAGUA_ERR_SYSTEM, "out of memory: could not allocate {} bytes of pinned staging memory", lease.bytes_);
  }
  lease.ptr_ = p;
}

void DeviceProxy::give_back(void* ptr, size_t bytes) {
  staging_progress_.fetch_add(1);
  std::lock_guard<std::mutex> lock(mutex_);
  if (ptr != nullptr)
    free_blocks_.emplace(bytes, ptr);
  else
    kept_bytes_ -= bytes;  // room that was never filled
  leased_bytes_ -= bytes;
  changed_.notify_all();
}

void DeviceProxy::drain_later(std::shared_ptr<StagingLease> staging, std::vector<StreamSignal> signals,
                              StreamSignal until, bool broken, std::shared_ptr<DeviceCompletion> completion,
                              std::shared_ptr<void> keep_alive) {
  if (!broken && until.reached()) {
    for (const StreamSignal& signal : signals) give_back_signal(signal);
    if (completion) completion->done.store(true, std::memory_order_release);
    return;  // (staging goes back as the lease ends)
  }
  if (broken) {  // a copy may be enqueued without its signal: nothing here is ever safe to reuse
    new std::shared_ptr<StagingLease>(std::move(staging));
    new std::shared_ptr<void>(std::move(keep_alive));
    signals_kept_.store(true);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_.config().timeout_ms);
  std::lock_guard<std::mutex> lock(draining_mutex_);
  const size_t bytes = staging->bytes();
  draining_.push_back(
      Draining{std::move(staging), std::move(signals), until, std::move(completion), deadline, std::move(keep_alive)});
  draining_bytes_ += bytes;
}

void DeviceProxy::drain(bool final) {  // final: what is still copied stays kept forever
  std::vector<Draining> done;
  {
    std::lock_guard<std::mutex> lock(draining_mutex_);
    if (draining_.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    for (auto it = draining_.begin(); it != draining_.end();) {
      if (it->until.reached()) {
        it->keep_alive.reset();  // under the lock, so that settle() returns with every ended call counted
        draining_bytes_ -= it->staging->bytes();
        done.push_back(std::move(*it));
        it = draining_.erase(it);
      } else if (final && now > it->deadline) {
        if (it->completion) {
          it->completion->status = BAGUA_ERR_CUDA;
          it->completion->error = "the copy of a request's output did not finish before the communicator was destroyed";
          it->completion->done.store(true, std::memory_order_release);
        }
        draining_bytes_ -= it->staging->bytes();
        new std::shared_ptr<StagingLease>(std::move(it->staging));  // the stream never got there: kept forever
        new std::shared_ptr<void>(std::move(it->keep_alive));       // (what the call's device work still uses)
        signals_kept_.store(true);
        it = draining_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Draining& d : done) {
    for (const StreamSignal& signal : d.signals) give_back_signal(signal);
    if (d.completion) d.completion->done.store(true, std::memory_order_release);
  }
  // (their staging goes back as `done` ends)
}

bool DeviceProxy::complete_request(DeviceCompletion& c) {
  if (c.done.load(std::memory_order_acquire)) return true;
  if (!c.output_waits.load(std::memory_order_acquire)) return false;
  if (!c.output_enqueued) {
    PendingOutput out;
    std::shared_ptr<DeviceCompletion> completion;
    {
      std::lock_guard<std::mutex> lock(requests_mutex_);
      auto it = std::find_if(request_outputs_.begin(), request_outputs_.end(),
                             [&](const RequestOutput& r) { return r.completion.get() == &c; });
      if (it == request_outputs_.end()) {  // (the proxy is being destroyed: it completes the request)
        return c.done.load(std::memory_order_acquire);
      }
      out = std::move(it->output);
      completion = std::move(it->completion);
      request_outputs_.erase(it);
    }
    c.output = out.output;
    c.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_.config().timeout_ms);
    bool touched = false, enqueued = false;
    try {
      // By kernel, as on the caller's stream: a copy engine's queue may hold a copy parked behind a gate.
      DeviceStream stream = copy_stream(out.device);
      touched = true;
      for (const DeviceCopy& copy : out.copies)
        if (copy.bytes > 0) runtime_.kernel_copy_async(copy.dst, copy.src, copy.bytes, stream);
      runtime_.write_value(stream, out.output.word, out.output.value);
      enqueued = true;
    } catch (const Error& e) {
      c.status = e.status();
      c.error = fmt::format("copying a request's output back: {}", e.what());
    }
    c.output_enqueued = true;
    if (!enqueued) {
      // A copy may be enqueued without its word: then the staging is never reused. The output is undefined.
      drain_later(std::move(out.staging), std::move(out.signals), out.output, touched);
      c.done.store(true, std::memory_order_release);
      return true;
    }
    // The proxy completes it too once the word is written (so does its destruction, at the latest).
    drain_later(std::move(out.staging), std::move(out.signals), out.output, false, std::move(completion));
  }
  if (c.output.reached()) {
    c.done.store(true, std::memory_order_release);
    return true;
  }
  if (std::chrono::steady_clock::now() > c.deadline) {
    c.status = BAGUA_ERR_CUDA;
    c.error = "the copy of a request's output back to device memory did not finish within BAGUA_TIMEOUT";
    c.done.store(true, std::memory_order_release);
    return true;
  }
  return false;
}

}  // namespace bagua
