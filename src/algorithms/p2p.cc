#include "algorithms/p2p.h"

namespace bagua {

void SendOp::advance(Transport& transport) {
  if (!posted_) {
    post_send(transport, transfer_, peer_, tag_, data_, bytes_);
    posted_ = true;
  }
  if (poll(transport, transfer_)) finish();
}

void RecvOp::advance(Transport& transport) {
  if (!posted_) {
    post_recv(transport, transfer_, peer_, tag_, data_, bytes_, unmatched_bits_);
    posted_ = true;
  }
  if (poll(transport, transfer_)) finish();
}

}  // namespace bagua
