// One logging facade over spdlog. Every line names its component and, where
// there is one, the transfer id:  [server] [xfer=00ab...] message
#pragma once

#include <cstdint>
#include <string>

#include "spdlog/spdlog.h"

namespace kvferry {

// Sets up the default logger: level name ("trace".."off"), optional file.
// Returns false (and logs why) on an unknown level.
bool InitLogging(const std::string& level, const std::string& file = "");

// Number of error-level lines logged since start (tests assert it stays 0).
uint64_t ErrorLogCount();
void CountErrorLog();

}  // namespace kvferry

#define KVF_LOG(level, component, fmtstr, ...) ::spdlog::level("[" component "] " fmtstr, ##__VA_ARGS__)

#define KVF_XLOG(level, component, xfer_id, fmtstr, ...) \
  ::spdlog::level("[" component "] [xfer={:016x}] " fmtstr, static_cast<uint64_t>(xfer_id), ##__VA_ARGS__)

#define KVF_LOG_ERROR(component, fmtstr, ...)         \
  do {                                                \
    ::kvferry::CountErrorLog();                       \
    KVF_LOG(error, component, fmtstr, ##__VA_ARGS__); \
  } while (0)

#define KVF_XLOG_ERROR(component, xfer_id, fmtstr, ...)         \
  do {                                                          \
    ::kvferry::CountErrorLog();                                 \
    KVF_XLOG(error, component, xfer_id, fmtstr, ##__VA_ARGS__); \
  } while (0)
