#include "io/resources.hpp"

#include <sys/resource.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.hpp"

namespace mla::io {

std::string human_bytes(uint64_t b) {
  char buf[64];
  if (b >= (uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
  else if (b >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
  else std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(b));
  return buf;
}

uint64_t free_bytes(const std::filesystem::path& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0)
    throw Error(path.string() + ": cannot read the filesystem's free space: " + std::strerror(errno));
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

void require_free_space(const std::filesystem::path& path, uint64_t need, const std::string& what) {
  const uint64_t want = need + need / 100;
  const uint64_t have = free_bytes(path);
  if (have < want)
    throw Error(what + ": needs " + human_bytes(want) + " (" + std::to_string(want) + " bytes) of disk space, but the "
                "filesystem of " + path.string() + " has " + human_bytes(have) + " free; free space or choose "
                "another output path");
}

std::string out_of_memory_message(const std::string& what, uint64_t need_bytes) {
  std::string limits;
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    limits += "address-space limit (ulimit -v) " + human_bytes(static_cast<uint64_t>(rl.rlim_cur));
  std::ifstream mi("/proc/meminfo");
  for (std::string key; mi >> key;) {
    uint64_t kb = 0;
    mi >> kb;
    if (key == "MemAvailable:") {
      limits += (limits.empty() ? "" : ", ") + std::string("MemAvailable ") + human_bytes(kb * 1024);
      break;
    }
    mi.ignore(256, '\n');
  }
  std::string m = "out of memory while " + what + " (a memory allocation failed";
  if (need_bytes > 0) m += "; this step needs about " + human_bytes(need_bytes) + " more";
  if (!limits.empty()) m += "; " + limits;
  return m + "): raise the limit, free memory, or use fewer --threads";
}

}  // namespace mla::io
