#include "server/leases.h"

#include <sys/random.h>

#include <vector>

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
  MutexLock lock(&mu_);
  leases_[l->key] = l;
  return l;
}

namespace {
constexpr absl::Duration kRememberExpired = absl::Minutes(10);
constexpr size_t kMaxRemembered = 100000;
}  // namespace

void LeaseTable::ExpireLocked(const std::string& key, absl::Time when) {
  if (expired_.size() >= kMaxRemembered) expired_.clear();
  expired_[key] = when;
  leases_.erase(key);
}

absl::StatusOr<std::shared_ptr<Lease>> LeaseTable::FindLocked(const std::string& key) {
  auto it = leases_.find(key);
  if (it == leases_.end()) {
    if (expired_.contains(key)) return absl::FailedPreconditionError("lease expired before the pull");
    return absl::NotFoundError("unknown transfer key (never issued, released or already delivered)");
  }
  if (!it->second->sending && absl::Now() > it->second->expires) {
    ExpireLocked(key, absl::Now());
    return absl::FailedPreconditionError("lease expired before the pull");
  }
  return it->second;
}

absl::StatusOr<std::shared_ptr<const Lease>> LeaseTable::Peek(const std::string& key) {
  MutexLock lock(&mu_);
  return FindLocked(key);
}

absl::StatusOr<std::shared_ptr<const Lease>> LeaseTable::Claim(const std::string& key) {
  MutexLock lock(&mu_);
  auto l = FindLocked(key);
  if (!l.ok()) return l.status();
  if ((*l)->sending) return absl::FailedPreconditionError("ticket is already being pulled");
  (*l)->sending = true;
  return std::shared_ptr<const Lease>(*l);
}

void LeaseTable::Unclaim(const std::string& key, bool delivered) {
  MutexLock lock(&mu_);
  auto it = leases_.find(key);
  if (it == leases_.end()) return;
  if (delivered) {
    leases_.erase(it);
  } else {
    it->second->sending = false;
  }
}

absl::Status LeaseTable::Release(const std::string& key) {
  MutexLock lock(&mu_);
  auto it = leases_.find(key);
  if (it == leases_.end()) return absl::NotFoundError("unknown transfer key");
  if (it->second->sending) return absl::FailedPreconditionError("lease is being sent; cancel the pull first");
  leases_.erase(it);
  return absl::OkStatus();
}

size_t LeaseTable::Sweep(absl::Time now) {
  MutexLock lock(&mu_);
  std::vector<std::string> due;
  for (const auto& [key, lease] : leases_) {
    if (!lease->sending && now > lease->expires) due.push_back(key);
  }
  for (const auto& key : due) ExpireLocked(key, now);
  for (auto it = expired_.begin(); it != expired_.end();) {
    if (now - it->second > kRememberExpired) {
      expired_.erase(it++);
    } else {
      ++it;
    }
  }
  return due.size();
}

size_t LeaseTable::size() const {
  MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace kvferry::server
