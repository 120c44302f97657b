// Temporaries of killed runs: a writer killed with SIGKILL leaves its ".OUT.tmp-PID-..." behind
// (no destructor runs); the next writer of the same output removes it, reporting its size, and
// leaves alone the temporaries of processes that still run and a moved-aside previous output
// that is the only copy.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "common/scratch_dir.hpp"
#include "io/atomic_output.hpp"
#include "io/hdf5.hpp"

namespace fs = std::filesystem;
using mla::io::AtomicDirectory;
using mla::io::remove_stale_temporaries;

namespace {

struct Scratch {
  mla::test::ScratchDir dir{"mla_stale"};
  const fs::path root = dir.path();
  std::vector<fs::path> hidden() const {
    std::vector<fs::path> v;
    for (const auto& e : fs::directory_iterator(root))
      if (e.path().filename().string()[0] == '.') v.push_back(e.path());
    return v;
  }
};

void write_bytes(const fs::path& p, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f << std::string(n, 'x');
}

// A PID that no longer runs: a child that exited and was reaped.
long dead_pid() {
  const pid_t c = ::fork();
  if (c == 0) ::_exit(0);
  int st = 0;
  ::waitpid(c, &st, 0);
  return c;
}

// Runs `body` in a child process, which must SIGKILL itself inside (while its writer is in
// scope: no destructors, no cleanup, what a kill -9 or the OOM killer does); returns after
// the child died by SIGKILL.
template <typename F>
void run_and_sigkill(F body) {
  const pid_t c = ::fork();
  if (c == 0) {
    body();
    ::_exit(3);  // body did not kill itself: the assertion below fails
  }
  int st = 0;
  ASSERT_EQ(::waitpid(c, &st, 0), c);
  ASSERT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << "child did not die by SIGKILL";
}

}  // namespace

TEST(StaleTemporaries, SigkilledConversionDirectoryIsRemovedByTheNextRun) {
  Scratch s;
  const fs::path out = s.root / "out";
  run_and_sigkill([&] {
    AtomicDirectory d(out);
    fs::create_directories(d.tmp_path() / "rank0");
    write_bytes(d.tmp_path() / "rank0" / "model.safetensors", 5000);
    ::kill(::getpid(), SIGKILL);  // mid-conversion
  });
  ASSERT_EQ(s.hidden().size(), 1u) << "the killed run should have left its temporary";
  const fs::path leaked = s.hidden()[0];
  EXPECT_NE(leaked.filename().string().find(".out.tmp-"), std::string::npos);

  AtomicDirectory again(out);  // the rerun
  EXPECT_FALSE(fs::exists(leaked)) << "stale temporary not removed";
  EXPECT_EQ(s.hidden().size(), 1u);  // only the new run's own temporary
  again.commit();
  EXPECT_TRUE(s.hidden().empty());
}

TEST(StaleTemporaries, ReportsSizeAndKeepsLiveAndUnrelatedEntries) {
  Scratch s;
  const fs::path out = s.root / "ckpt";
  const long gone = dead_pid();
  const fs::path stale = s.root / (".ckpt.tmp-" + std::to_string(gone) + "-0-123");
  fs::create_directories(stale / "rank1");
  write_bytes(stale / "a.safetensors", 1000);
  write_bytes(stale / "rank1" / "b.safetensors", 234);
  const fs::path legacy_file = s.root / (".ckpt.tmp" + std::to_string(gone));  // older h5 naming
  write_bytes(legacy_file, 10);
  const fs::path live = s.root / (".ckpt.tmp-" + std::to_string(::getpid()) + "-9-9");  // a running writer
  fs::create_directories(live);
  const fs::path other = s.root / (".ckpt2.tmp-" + std::to_string(gone) + "-0-1");  // another output
  fs::create_directories(other);

  const auto found = remove_stale_temporaries(out);
  ASSERT_EQ(found.size(), 2u);
  uint64_t total = 0;
  for (const auto& t : found) {
    EXPECT_TRUE(t.removed) << t.path;
    EXPECT_EQ(t.pid, gone);
    total += t.bytes;
  }
  EXPECT_EQ(total, 1244u);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(legacy_file));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
}

TEST(StaleTemporaries, MovedAsidePreviousOutputIsKeptWhenItIsTheOnlyCopy) {
  Scratch s;
  const fs::path out = s.root / "out";
  const long gone = dead_pid();
  const fs::path old = s.root / (".out.old-" + std::to_string(gone) + "-0-5");
  fs::create_directories(old);
  write_bytes(old / "x", 7);
  auto found = remove_stale_temporaries(out);  // out missing: the old one is the only copy
  ASSERT_EQ(found.size(), 1u);
  EXPECT_FALSE(found[0].removed);
  EXPECT_NE(found[0].note.find("restore"), std::string::npos);
  EXPECT_TRUE(fs::exists(old));
  fs::create_directories(out);  // the new output exists: the old one is garbage
  found = remove_stale_temporaries(out);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_TRUE(found[0].removed);
  EXPECT_FALSE(fs::exists(old));
}

TEST(StaleTemporaries, SigkilledHdf5WriterFileIsRemovedByTheNextWrite) {
  Scratch s;
  const fs::path out = s.root / "calib.h5";
  run_and_sigkill([&] {
    mla::io::h5::write_atomically(out, [](mla::io::h5::File& f) {
      std::vector<double> v(4096, 1.0);
      f.root().write<double>("x", {4096}, v.data());
      f.flush();
      ::kill(::getpid(), SIGKILL);  // mid-write
    });
  });
  ASSERT_EQ(s.hidden().size(), 1u);
  const fs::path leaked = s.hidden()[0];
  mla::io::h5::write_atomically(out, [](mla::io::h5::File& f) {
    std::vector<double> v(8, 2.0);
    f.root().write<double>("x", {8}, v.data());
  });
  EXPECT_FALSE(fs::exists(leaked));
  EXPECT_TRUE(s.hidden().empty());
  EXPECT_TRUE(fs::exists(out));
}
