#include "core/operation.h"

#include <algorithm>

#include "base/error.h"

namespace bagua {

void Operation::fail(bagua_status_t status, const std::string& message) {
  if (state_ != State::kRunning) return;
  state_ = State::kFailed;
  status_ = status;
  error_ = message;
}

void Operation::post_send(Transport& transport, Transfer& transfer, int peer, uint64_t tag, const void* data,
                          size_t bytes, SendMode mode) {
  transport.post_send(transfer, peer, tag, data, bytes, mode);
  bytes_sent_ += bytes;
  if (std::find(watched_.begin(), watched_.end(), &transfer) == watched_.end()) watched_.push_back(&transfer);
}

void Operation::post_recv(Transport& transport, Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes) {
  transport.post_recv(transfer, peer, tag, data, bytes);
  if (std::find(watched_.begin(), watched_.end(), &transfer) == watched_.end()) watched_.push_back(&transfer);
}

bool Operation::poll(Transport& transport, Transfer& transfer) {
  if (transfer.state == Transfer::State::kPending) {
    transport.check(transfer);
    if (transfer.state == Transfer::State::kDone) ++events_;
  }
  if (transfer.state == Transfer::State::kFailed)
    throw Error(transfer.failure == BAGUA_SUCCESS ? BAGUA_ERR_REMOTE : transfer.failure,
                fmt::format("{}: {}", description_, transfer.error));
  return transfer.state == Transfer::State::kDone;
}

std::string Operation::waiting_for() const {
  std::string out;
  int shown = 0;
  for (const Transfer* t : watched_) {
    if (t->state != Transfer::State::kPending) continue;
    if (shown++ == 3) {
      out += ", ...";
      break;
    }
    out += fmt::format("{}{} of {} bytes {} rank {}", out.empty() ? "" : ", ", t->is_send ? "send" : "receive",
                       t->bytes, t->is_send ? "to" : "from", t->peer);
  }
  return out.empty() ? "nothing pending" : out;
}

}  // namespace bagua
