#include "transport/shared_segments.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace bagua {

std::unique_ptr<SharedSegments> SharedSegments::create(int rank, int nranks, std::string* why) {
  std::unique_ptr<SharedSegments> s(new SharedSegments());
  s->rank_ = rank;
  s->slot_bytes_ = shared_segment_slot_bytes(nranks);
  const size_t bytes = s->slot_bytes_ * kSharedSegmentSlotsPerRank * static_cast<size_t>(nranks);
  s->bytes_ = bytes;
  s->mapped_.assign(static_cast<size_t>(nranks), nullptr);
  s->fd_ = memfd_create("bagua-segment", MFD_CLOEXEC);
  if (s->fd_ < 0) {
    *why = fmt::format("memfd_create: {}", std::strerror(errno));
    return nullptr;
  }
  if (ftruncate(s->fd_, static_cast<off_t>(bytes)) != 0) {
    *why = fmt::format("ftruncate to {} bytes: {}", bytes, std::strerror(errno));
    return nullptr;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd_, 0);
  if (p == MAP_FAILED) {
    *why = fmt::format("mmap of {} bytes: {}", bytes, std::strerror(errno));
    return nullptr;
  }
  s->own_ = static_cast<uint8_t*>(p);
  return s;
}

SharedSegments::~SharedSegments() {
  for (uint8_t* p : mapped_)
    if (p != nullptr) munmap(p, bytes_);
  if (own_ != nullptr) munmap(own_, bytes_);
  close_descriptor();
}

// The pid alone: segments are mapped only once every rank passed the cross-memory probe, which requires one PID
// namespace (docs/transport.md, "PID namespaces").
Bytes SharedSegments::descriptor() const {
  Writer w;
  w.u32(static_cast<uint32_t>(getpid()));
  w.u32(static_cast<uint32_t>(fd_));
  w.u64(bytes_);
  return w.out();
}

std::string SharedSegments::map_peers(const std::vector<Bytes>& descriptors, const std::vector<bool>& host_peer) {
  for (size_t r = 0; r < descriptors.size() && r < mapped_.size(); ++r) {
    if (!host_peer[r] || static_cast<int>(r) == rank_) continue;
    if (descriptors[r].size() != 16) return fmt::format("rank {} has no segment", r);
    Reader in(descriptors[r], "shared segment descriptor");
    uint32_t pid = in.u32(), fd = in.u32();
    uint64_t bytes = in.u64();
    if (bytes != bytes_) return fmt::format("rank {}'s segment has {} bytes, this rank's {}", r, bytes, bytes_);
    std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
    int peer_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (peer_fd < 0) return fmt::format("opening rank {}'s segment ({}): {}", r, path, std::strerror(errno));
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, peer_fd, 0);
    int mmap_errno = errno;
    close(peer_fd);
    if (p == MAP_FAILED) return fmt::format("mapping rank {}'s segment: {}", r, std::strerror(mmap_errno));
    mapped_[r] = static_cast<uint8_t*>(p);
  }
  return {};
}

void SharedSegments::close_descriptor() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

}  // namespace bagua
