#include "io/atomic_output.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <signal.h>
#include <spdlog/spdlog.h>

#include <regex>

#include "core/error.hpp"
#include "io/resources.hpp"

namespace mla::io {
namespace fs = std::filesystem;

namespace {

// Unique per process and call: pid + a counter + a random word, so concurrent writers
// (threads or processes) beside the same destination never share a temporary directory.
std::string unique_suffix() {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed = std::random_device{}() ^
                               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(seed % 1000000);
}

// Makes a rename durable: the directory entry lives in the parent.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// Makes everything under `root` durable before it is renamed into place: writeback of every
// file is started first (so the disk works on all of them at once), then each file and each
// directory is fsynced. Writers may therefore skip their own per-file fsync.
void sync_tree(const fs::path& root) {
  std::vector<fs::path> files, dirs{root};
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_symlink()) continue;
    if (e.is_directory()) dirs.push_back(e.path());
    else if (e.is_regular_file()) files.push_back(e.path());
  }
  auto open_ro = [](const fs::path& p, int extra) {
    const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | extra);
    if (fd < 0) throw Error(p.string() + ": cannot open to sync: " + std::strerror(errno));
    return fd;
  };
  std::vector<int> fds;
  try {
    for (const auto& f : files) {
      fds.push_back(open_ro(f, 0));
      ::sync_file_range(fds.back(), 0, 0, SYNC_FILE_RANGE_WRITE);  // a hint; fsync below decides
    }
    for (size_t i = 0; i < fds.size(); ++i)
      if (::fsync(fds[i]) != 0) throw Error(files[i].string() + ": fsync failed: " + std::strerror(errno));
  } catch (...) {
    for (int fd : fds) ::close(fd);
    throw;
  }
  for (int fd : fds) ::close(fd);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    const int fd = open_ro(*it, O_DIRECTORY);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) throw Error(it->string() + ": fsync failed: " + std::strerror(err));
  }
}

// "." + name + tag + suffix, appended piecewise (GCC 12 warns falsely on "." + std::string).
fs::path hidden_sibling(const fs::path& parent, const fs::path& name, const char* tag) {
  std::string s(1, '.');
  s += name.string();
  s += tag;
  s += unique_suffix();
  return parent / s;
}

// True when `inner` is `outer` or lies below it (both absolute and canonical).
bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (o->empty()) continue;  // trailing separator
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

fs::path parent_of(const fs::path& p) {
  fs::path parent = p.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// True when process `pid` exists (kill with signal 0 checks without signalling; EPERM means
// it exists but belongs to another user).
bool process_alive(long pid) {
  if (pid <= 0) return true;  // not a PID we can judge: keep
  return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
}

uint64_t tree_bytes(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(p, ec))) {
    const auto n = fs::file_size(p, ec);
    return ec ? 0 : n;
  }
  uint64_t total = 0;
  for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (it->is_regular_file(ec)) total += it->file_size(ec);
  }
  return total;
}

std::string regex_escape(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}


}  // namespace

fs::path temporary_sibling(const fs::path& final_path, const char* tag) {
  fs::path f = final_path;
  if (f.filename().empty()) f = f.parent_path();
  return hidden_sibling(parent_of(f), f.filename(), tag);
}

std::vector<StaleTemporary> remove_stale_temporaries(const fs::path& final_path) {
  fs::path f = final_path;
  if (f.filename().empty()) f = f.parent_path();
  std::vector<StaleTemporary> found;
  const fs::path parent = parent_of(f);
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) return found;
  // .NAME.tmp-PID-..., .NAME.tmpPID (older file writers), .NAME.old-PID-...
  const std::regex pattern("^\\." + regex_escape(f.filename().string()) + "\\.(tmp-?|old-)([0-9]+)(-.*)?$");
  const bool final_exists = fs::exists(fs::symlink_status(f, ec));
  for (auto it = fs::directory_iterator(parent, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, pattern)) continue;
    StaleTemporary t;
    t.path = it->path();
    t.pid = std::stol(m[2].str().substr(0, 9));
    if (process_alive(t.pid)) continue;  // a running writer's (or an unknown PID's) temporary
    t.bytes = tree_bytes(t.path);
    const bool old = m[1].str() == "old-";
    if (old && !final_exists) {
      t.note = "kept: it holds the previous " + f.string() + ", moved aside by a run that died before " +
               "replacing it; rename it back to restore it";
      spdlog::warn("{}: {} ({}) left by process {} (gone): {}", f.string(), t.path.string(), human_bytes(t.bytes),
                   t.pid, t.note);
      found.push_back(t);
      continue;
    }
    std::error_code rec;
    fs::remove_all(t.path, rec);
    t.removed = !rec;
    if (rec) t.note = "could not remove it: " + rec.message();
    if (t.removed)
      spdlog::warn("{}: removed stale temporary {} ({}) left by process {}, which no longer runs",
                   f.string(), t.path.string(), human_bytes(t.bytes), t.pid);
    else
      spdlog::warn("{}: stale temporary {} ({}) left by process {}: {}", f.string(), t.path.string(),
                   human_bytes(t.bytes), t.pid, t.note);
    found.push_back(t);
  }
  return found;
}

AtomicDirectory::AtomicDirectory(fs::path final_path, bool overwrite, const std::vector<fs::path>& inputs)
    : final_(std::move(final_path)), overwrite_(overwrite) {
  // "out/" would have an empty filename; normalise so the temporary name is a sibling.
  if (final_.filename().empty()) final_ = final_.parent_path();
  if (final_.empty()) throw Error("output directory: empty path");
  std::error_code ec;
  const fs::path out_abs = fs::weakly_canonical(fs::absolute(final_), ec);
  for (const auto& input : inputs) {
    const fs::path in_abs = fs::weakly_canonical(fs::absolute(input), ec);
    if (is_within(out_abs, in_abs) || is_within(in_abs, out_abs))
      throw Error(final_.string() + ": output overlaps the input " + input.string() + "; choose another output path");
  }
  const auto status = fs::symlink_status(final_, ec);
  if (fs::exists(status)) {
    if (!overwrite_)
      throw Error(final_.string() + ": output already exists (pass overwrite to replace it)");
    if (!fs::is_directory(status))
      throw Error(final_.string() + ": output exists and is not a directory; refusing to replace it");
  }
  const fs::path parent = parent_of(final_);
  fs::create_directories(parent, ec);
  if (ec) throw Error(parent.string() + ": cannot create parent directory: " + ec.message());
  remove_stale_temporaries(final_);  // a killed earlier run's space comes back first
  // Beside the destination, so commit() is a same-filesystem rename.
  tmp_ = hidden_sibling(parent, final_.filename(), ".tmp-");
  if (!fs::create_directory(tmp_, ec) || ec)
    throw Error(tmp_.string() + ": cannot create temporary directory: " + (ec ? ec.message() : "already exists"));
}

AtomicDirectory::~AtomicDirectory() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);  // best effort; a destructor must not throw
}

void AtomicDirectory::commit() {
  if (committed_) throw Error(final_.string() + ": commit() called twice");
  sync_tree(tmp_);  // nothing that looks complete exists before all of it is durable
  std::error_code ec;
  fs::path old;
  if (fs::exists(fs::symlink_status(final_, ec))) {
    if (!overwrite_) throw Error(final_.string() + ": output appeared while it was being written; not replacing it");
    // Move the old one aside first: rename() cannot replace a non-empty directory.
    old = hidden_sibling(parent_of(final_), final_.filename(), ".old-");
    fs::rename(final_, old, ec);
    if (ec) throw Error(final_.string() + ": cannot move the existing output aside: " + ec.message());
  }
  fs::rename(tmp_, final_, ec);
  if (ec) {
    std::error_code ec2;
    if (!old.empty()) fs::rename(old, final_, ec2);  // put the previous output back
    throw Error(tmp_.string() + ": cannot rename to " + final_.string() + ": " + ec.message());
  }
  committed_ = true;
  fsync_dir(parent_of(final_));
  if (!old.empty()) fs::remove_all(old, ec);
}

AtomicFile::AtomicFile(fs::path final_path) : final_(std::move(final_path)) {
  if (final_.empty() || final_.filename().empty()) throw Error("output file: '" + final_.string() + "' is not a file path");
  remove_stale_temporaries(final_);  // of earlier runs that were killed before the rename
  tmp_ = hidden_sibling(parent_of(final_), final_.filename(), ".tmp-");
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  std::error_code ec;
  fs::remove(tmp_, ec);  // best effort; a destructor must not throw
}

void AtomicFile::commit() {
  if (committed_) throw Error(final_.string() + ": commit() called twice");
  std::error_code ec;
  fs::rename(tmp_, final_, ec);
  if (ec) throw Error(tmp_.string() + ": cannot rename to " + final_.string() + ": " + ec.message());
  committed_ = true;
}

void write_file_atomically(const fs::path& path, std::string_view bytes, bool durable) {
  AtomicFile file(path);
  const std::string tmp = file.tmp_path().string();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot write '" + tmp + "': " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw Error("write failed for '" + tmp + "': " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  if (durable && ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error("fsync failed for '" + tmp + "': " + std::strerror(err));
  }
  if (::close(fd) != 0) throw Error("close failed for '" + tmp + "': " + std::strerror(errno));
  file.commit();
}

}  // namespace mla::io
