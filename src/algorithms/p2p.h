// Point-to-point send and receive as operations.
#pragma once

#include "core/operation.h"

namespace bagua {

class SendOp : public Operation {
 public:
  SendOp(const void* data, size_t bytes, int peer, uint64_t tag, std::string description)
      : Operation(BAGUA_OPKIND_SEND, std::move(description)), data_(data), bytes_(bytes), peer_(peer), tag_(tag) {}
  void advance(Transport& transport) override;

 private:
  const void* data_;
  size_t bytes_;
  int peer_;
  uint64_t tag_;
  bool posted_ = false;
  Transfer transfer_;
};

class RecvOp : public Operation {
 public:
  // unmatched_bits: the fingerprint bits of tag, compared on arrival (core/tags.h)
  RecvOp(void* data, size_t bytes, int peer, uint64_t tag, uint64_t unmatched_bits, std::string description)
      : Operation(BAGUA_OPKIND_RECV, std::move(description)),
        data_(data),
        bytes_(bytes),
        peer_(peer),
        tag_(tag),
        unmatched_bits_(unmatched_bits) {}
  void advance(Transport& transport) override;

 private:
  void* data_;
  size_t bytes_;
  int peer_;
  uint64_t tag_;
  uint64_t unmatched_bits_;
  bool posted_ = false;
  Transfer transfer_;
};

}  // namespace bagua
