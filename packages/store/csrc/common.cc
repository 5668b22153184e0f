#include "common.h"

#include <cstdio>
#include <mutex>

namespace rayfield {

std::string UniqueID::Hex() const {
  static const char* digits = "0123456789abcdef";
  std::string out(kIdSize * 2, '0');
  for (size_t i = 0; i < kIdSize; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 15];
  }
  return out;
}

namespace {
std::mutex g_log_mu;
std::function<void(int, const std::string&)> g_sink;
}  // namespace

void Log(int level, const std::string& message) {
  std::function<void(int, const std::string&)> sink;
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    sink = g_sink;
  }
  if (sink) {
    sink(level, message);
    return;
  }
  static const char* names[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
  if (level < 2) return;  // info and debug only through a sink
  std::fprintf(stderr, "[rayfield.store %s] %s\n", names[level & 3], message.c_str());
}

void SetLogSink(std::function<void(int, const std::string&)> sink) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_sink = std::move(sink);
}

}  // namespace rayfield
