// The bucket scheduler on device tensors: what the caller's thread enqueues at a mark and at wait, and how the
// scheduler's thread waits for the copies in without a CUDA call (docs/scheduler.md, "Device memory").
#include "algorithms/scheduler/bucket_scheduler.h"

#include <chrono>
#include <thread>

#include "base/deadline.h"
#include "base/error.h"

namespace bagua {

// At a mark, on the scheduler's stream: after the previous step's copies back (which read this staging), and after
// the caller's event (as recorded now) or the legacy default stream's work so far, the copy in (by kernel: a copy
// engine's queue can hold a copy behind a parked stream), then the tensor's staged word. An unused tensor writes its
// word too: the thread then knows the staging is free to zero.
void BucketScheduler::stage_at_mark(int tensor, Mark kind, void* event, uint32_t step_word) {
  DeviceRuntime& rt = device_runtime();
  const uint64_t step = step_word - 1u;
  if (copied_back_ && copied_back_step_ != step) {
    rt.wait_event(stream_, *copied_back_);
    copied_back_step_ = step;
  }
  const Tensor& t = tensors_[tensor];
  if (kind == Mark::kReady && t.bytes > 0) {
    if (event != nullptr) {
      rt.wait_user_event(stream_, event);
    } else {
      std::unique_ptr<DeviceEvent> before = rt.record(nullptr);
      rt.wait_event(stream_, *before);
    }
    rt.kernel_copy_async(t.staged, t.data, t.bytes, stream_);
  }
  rt.write_value(stream_, static_cast<uint32_t*>(staged_words_->data) + tensor, step_word);
}

// At wait, on the caller's stream: once the thread has published the step as finished, every tensor's copy back
// (unused ones get the result too, as host tensors do), then an event that the next step's copies in wait for.
void BucketScheduler::copy_back_at_wait(DeviceStream stream, uint64_t step, bool skipped) {
  DeviceRuntime& rt = device_runtime();
  {  // the waited stream reads the done word from here on: keep it (and the staging) until it has passed
    auto it = std::find_if(waited_.begin(), waited_.end(), [&](const auto& w) { return w.first == stream; });
    if (it == waited_.end()) waited_.emplace_back(stream, nullptr);
  }
  rt.wait_value(stream, static_cast<const volatile uint32_t*>(done_word_->data), static_cast<uint32_t>(step + 1));
  if (!skipped) {
    // (Not behind the step's copies in: after a failure released the word, one may wait for a caller's event that
    // never completes. The contents are undefined then.)
    const bool by_kernel = rt.kernel_copies_on(stream, device_);
    for (const Tensor& t : tensors_) rt.staging_copy_async(t.data, t.staged, t.bytes, stream, by_kernel);
  }
  std::shared_ptr<DeviceEvent> passed = rt.record(stream);
  if (!skipped) copied_back_ = passed;
  // (An event released here is destroyed under enqueue_mutex_ only, which the scheduler's thread never takes.)
  std::find_if(waited_.begin(), waited_.end(), [&](const auto& w) { return w.first == stream; })->second =
      std::move(passed);
}

// The scheduler's thread: polls host memory only, so that a user thread waiting inside the driver for a stream
// parked on this step cannot stop it (docs/cuda.md, "What a parked stream blocks").
void BucketScheduler::await_staged(const Bucket& b) {
  const Deadline deadline = comm_->op_deadline();
  const uint32_t want = static_cast<uint32_t>(done_generation_ + 1);
  const auto* words = static_cast<const uint32_t*>(staged_words_->data);
  for (int i : b.spec.tensors) {
    for (;;) {
      if (static_cast<int32_t>(__atomic_load_n(words + i, __ATOMIC_ACQUIRE) - want) >= 0) break;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (failed_) throw_failure();
        if (quit_) fail(BAGUA_ERR_ABORTED, "the scheduler was destroyed during a step");
      }
      if (deadline.expired())
        fail(BAGUA_ERR_TIMEOUT,
             "tensor {} was not copied in within {} ms of its bucket's start (the event it was marked ready with, or "
             "the legacy default stream's work before the mark, did not complete)",
             i, comm_->config().timeout_ms);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

}  // namespace bagua
