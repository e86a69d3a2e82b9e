#include "core/operation.h"

#include <algorithm>

#include "base/error.h"
#include "core/tags.h"

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

void Operation::post_recv(Transport& transport, Transfer& transfer, int peer, uint64_t tag, void* data, size_t bytes,
                          uint64_t unmatched_bits) {
  transport.post_recv(transfer, peer, tag, data, bytes, unmatched_bits);
  if (std::find(watched_.begin(), watched_.end(), &transfer) == watched_.end()) watched_.push_back(&transfer);
}

bool Operation::poll(Transport& transport, Transfer& transfer) {
  if (transfer.state == Transfer::State::kPending) {
    transport.check(transfer);
    if (transfer.state == Transfer::State::kDone) count_event();
  }
  if (transfer.state == Transfer::State::kFailed && transfer.tag_mismatch)
    throw Error(
        BAGUA_ERR_INVALID_USAGE,
        fmt::format("{}: {}", description_, describe_call_mismatch(transfer.tag, transfer.sender_tag, transfer.peer)));
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

std::string Operation::mismatched_message(Transport& transport) const {
  const uint64_t mask = kTagSpaceMask | (uint64_t{0xfff} << 32) | kTagSourceMask;  // space, sequence, sender
  for (const Transfer* t : watched_) {
    if (t->state != Transfer::State::kPending || t->is_send || t->unmatched_bits == 0) continue;
    uint64_t sender_tag = 0;
    if (transport.find_unmatched(t->tag, mask, &sender_tag) && ((sender_tag ^ t->tag) & t->unmatched_bits) != 0)
      return describe_call_mismatch(t->tag, sender_tag, t->peer);
  }
  return {};
}

std::string Operation::unmatched_messages(Transport& transport) const {
  std::string out;
  std::vector<int> peers;
  for (const Transfer* t : watched_) {
    if (t->state != Transfer::State::kPending || t->is_send) continue;
    if (std::find(peers.begin(), peers.end(), t->peer) != peers.end()) continue;
    peers.push_back(t->peer);
    uint64_t sender_tag = 0;
    // The same space and sender; any sequence, step and fingerprint.
    if (!transport.find_unmatched(t->tag, kTagSpaceMask | kTagSourceMask, &sender_tag)) continue;
    out += fmt::format("{}rank {} sent {}, which no receive here matches", out.empty() ? "" : "; ", t->peer,
                       describe_message(sender_tag));
  }
  return out;
}

}  // namespace bagua
