#include "bootstrap/unique_id.h"

#include <cstring>
#include <thread>

#include "base/error.h"
#include "bootstrap/hmac.h"
#include "bootstrap/root_server.h"

namespace bagua {

namespace {
constexpr uint32_t kUniqueIdMagic = 0x44494742;  // "BGID"
constexpr uint16_t kUniqueIdVersion = 1;
constexpr size_t kSecretSize = 32;
}  // namespace

void UniqueId::encode(bagua_unique_id_t* out) const {
  Writer w;
  w.u32(kUniqueIdMagic);
  w.u16(kUniqueIdVersion);
  w.u16(static_cast<uint16_t>(root.length));
  w.raw(&root.storage, root.length);
  w.u64(group_key);
  w.u8(static_cast<uint8_t>(secret.size()));
  w.raw(secret.data(), secret.size());
  static_assert(sizeof(out->internal) >= 4 + 2 + 2 + sizeof(sockaddr_in6) + 8 + 1 + kSecretSize);
  std::memset(out->internal, 0, sizeof(out->internal));
  std::memcpy(out->internal, w.out().data(), w.out().size());
}

UniqueId UniqueId::decode(const bagua_unique_id_t& in) {
  Reader r(reinterpret_cast<const uint8_t*>(in.internal), sizeof(in.internal), "unique id");
  try {
    if (r.u32() != kUniqueIdMagic || r.u16() != kUniqueIdVersion) throw Error(BAGUA_ERR_INVALID_ARGUMENT, "");
    UniqueId id;
    id.root.length = r.u16();
    if (id.root.length != sizeof(sockaddr_in) && id.root.length != sizeof(sockaddr_in6))
      throw Error(BAGUA_ERR_INVALID_ARGUMENT, "");
    r.raw(&id.root.storage, id.root.length);
    if (id.root.storage.ss_family != AF_INET && id.root.storage.ss_family != AF_INET6)
      throw Error(BAGUA_ERR_INVALID_ARGUMENT, "");
    id.group_key = r.u64();
    size_t secret_size = r.u8();
    if (secret_size > kSecretSize) throw Error(BAGUA_ERR_INVALID_ARGUMENT, "");
    id.secret.resize(secret_size);
    r.raw(id.secret.data(), secret_size);
    return id;
  } catch (const Error&) {
    fail(BAGUA_ERR_INVALID_ARGUMENT, "the unique id was not produced by bagua_get_unique_id (or was corrupted)");
  }
}

UniqueId create_unique_id_with_root() {
  UniqueId id;
  Socket listener = Socket::listen(choose_listen_address());
  id.root = listener.local_address();
  id.secret = random_bytes(kSecretSize);
  const Bytes key = random_bytes(8);
  Reader key_reader(key, "key");
  id.group_key = key_reader.u64();
  RootServer::start_detached(std::move(listener), id.secret, RootServer::Mode::kOneGroup,
                             /*idle_limit_ms=*/3600 * 1000);
  return id;
}

}  // namespace bagua
