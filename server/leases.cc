#include "server/leases.h"

#include <sys/random.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"

namespace kvferry::server {

std::string NewLeaseKey() {
  unsigned char buf[16];
  size_t got = 0;
  while (got < sizeof(buf)) {
    ssize_t n = getrandom(buf + got, sizeof(buf) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(buf), sizeof(buf)));
}

std::shared_ptr<const Lease> LeaseTable::Create(std::shared_ptr<Pool> pool, std::vector<uint32_t> blocks,
                                                absl::Duration ttl) {
  auto l = std::make_shared<Lease>();
  l->key = NewLeaseKey();
  l->pool = std::move(pool);
  l->blocks = std::move(blocks);
  l->expires = absl::Now() + ttl;
  absl::MutexLock lock(&mu_);
  leases_[l->key] = l;
  return l;
}

absl::StatusOr<std::shared_ptr<Lease>> LeaseTable::FindLocked(const std::string& key) {
  auto it = leases_.find(key);
  if (it == leases_.end()) return absl::NotFoundError("unknown transfer key (never issued, released or already delivered)");
  if (!it->second->sending && absl::Now() > it->second->expires) {
    leases_.erase(it);
    return absl::FailedPreconditionError("lease expired");
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<const Lease>> LeaseTable::Peek(const std::string& key) {
  absl::MutexLock lock(&mu_);
  return FindLocked(key);
}

absl::StatusOr<std::shared_ptr<const Lease>> LeaseTable::Claim(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto l = FindLocked(key);
  if (!l.ok()) return l.status();
  if ((*l)->sending) return absl::FailedPreconditionError("ticket is already being pulled");
  (*l)->sending = true;
  return std::shared_ptr<const Lease>(*l);
}

void LeaseTable::Unclaim(const std::string& key, bool delivered) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(key);
  if (it == leases_.end()) return;
  if (delivered) {
    leases_.erase(it);
  } else {
    it->second->sending = false;
  }
}

absl::Status LeaseTable::Release(const std::string& key) {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(key);
  if (it == leases_.end()) return absl::NotFoundError("unknown transfer key");
  if (it->second->sending) return absl::FailedPreconditionError("lease is being sent; cancel the pull first");
  leases_.erase(it);
  return absl::OkStatus();
}

size_t LeaseTable::Sweep(absl::Time now) {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (!it->second->sending && now > it->second->expires) {
      leases_.erase(it++);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

size_t LeaseTable::size() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace kvferry::server
