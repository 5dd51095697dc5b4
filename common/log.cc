#include "common/log.h"

#include <atomic>

#include "spdlog/sinks/basic_file_sink.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace kvferry {
namespace {
std::atomic<uint64_t> g_error_logs{0};
}

uint64_t ErrorLogCount() { return g_error_logs.load(std::memory_order_relaxed); }
void CountErrorLog() { g_error_logs.fetch_add(1, std::memory_order_relaxed); }

bool InitLogging(const std::string& level, const std::string& file) {
  auto lvl = spdlog::level::from_str(level);
  // from_str maps unknown names to "off"; only accept an explicit "off".
  if (lvl == spdlog::level::off && level != "off") {
    spdlog::error("unknown log level '{}' (use trace, debug, info, warn, error, critical, off)", level);
    return false;
  }
  std::shared_ptr<spdlog::logger> logger;
  if (file.empty()) {
    logger = spdlog::stderr_color_mt("kvferry");
  } else {
    logger = spdlog::basic_logger_mt("kvferry", file);
  }
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ %v");
  logger->set_level(lvl);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
  return true;
}

}  // namespace kvferry
