// AtomicDirectory: nothing appears at the destination before commit(), an abandoned one
// leaves nothing behind, an existing destination is refused unless overwrite.
#include <gtest/gtest.h>

#include <fstream>

#include "common/scratch_dir.hpp"
#include "core/error.hpp"
#include "io/atomic_output.hpp"

namespace fs = std::filesystem;
using mla::io::AtomicDirectory;

namespace {

struct Scratch {
  mla::test::ScratchDir dir{"mla_atomic"};
  const fs::path root = dir.path();
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(root), fs::directory_iterator())); }
};

void touch(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(AtomicDirectory, CommitRenamesIntoPlace) {
  Scratch s;
  const fs::path out = s.root / "out";
  {
    AtomicDirectory d(out);
    EXPECT_EQ(d.tmp_path().parent_path(), s.root);  // same filesystem: rename is atomic
    EXPECT_TRUE(fs::is_directory(d.tmp_path()));
    touch(d.tmp_path() / "f.txt", "hello");
    EXPECT_FALSE(fs::exists(out));
    d.commit();
  }
  EXPECT_EQ(slurp(out / "f.txt"), "hello");
  EXPECT_EQ(s.entries(), 1u);  // no temporary left beside it
}

TEST(AtomicDirectory, AbandonedLeavesNothing) {
  Scratch s;
  {
    AtomicDirectory d(s.root / "out");
    touch(d.tmp_path() / "partial", "x");
  }
  EXPECT_EQ(s.entries(), 0u);
}

TEST(AtomicDirectory, RefusesExistingUnlessOverwrite) {
  Scratch s;
  const fs::path out = s.root / "out";
  fs::create_directories(out);
  touch(out / "old.txt", "old");
  EXPECT_THROW(AtomicDirectory{out}, mla::Error);
  try {
    AtomicDirectory d(out);
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find(out.string()), std::string::npos) << e.what();
  }
  {
    AtomicDirectory d(out, /*overwrite=*/true);
    touch(d.tmp_path() / "new.txt", "new");
    EXPECT_TRUE(fs::exists(out / "old.txt"));  // untouched until commit
    d.commit();
  }
  EXPECT_FALSE(fs::exists(out / "old.txt"));
  EXPECT_EQ(slurp(out / "new.txt"), "new");
  EXPECT_EQ(s.entries(), 1u);
}

TEST(AtomicDirectory, RefusesToReplaceAFileAndCreatesParents) {
  Scratch s;
  touch(s.root / "file", "x");
  EXPECT_THROW(AtomicDirectory(s.root / "file", true), mla::Error);
  {
    AtomicDirectory d(s.root / "a" / "b" / "out");
    d.commit();
    EXPECT_THROW(d.commit(), mla::Error);
  }
  EXPECT_TRUE(fs::is_directory(s.root / "a" / "b" / "out"));
}

TEST(AtomicDirectory, RefusesToOverlapItsInput) {
  Scratch s;
  const fs::path in = s.root / "model";
  fs::create_directories(in / "sub");
  touch(in / "config.json", "{}");
  // Same directory (also spelled differently), inside it, or around it: all refused, even
  // with overwrite, and the input is left alone.
  for (const fs::path& out : {in, s.root / "." / "model", in / "sub" / "out", s.root}) {
    EXPECT_THROW(AtomicDirectory(out, true, {in}), mla::Error) << out;
  }
  EXPECT_EQ(slurp(in / "config.json"), "{}");
  // A sibling whose name merely starts the same is fine.
  AtomicDirectory ok(s.root / "model-out", false, {in});
  ok.commit();
  EXPECT_TRUE(fs::is_directory(s.root / "model-out"));
}

TEST(AtomicFile, WritesThroughAHiddenTemporaryAndLeavesNothingElse) {
  Scratch s;
  const fs::path out = s.root / "manifest.json";
  {
    mla::io::AtomicFile f(out);
    EXPECT_EQ(f.tmp_path().parent_path(), s.root);  // same filesystem: rename is atomic
    EXPECT_EQ(f.tmp_path().filename().string().rfind(".manifest.json.tmp-", 0), 0u) << f.tmp_path();
    touch(f.tmp_path(), "partial");
  }  // not committed: the temporary goes, nothing appears
  EXPECT_EQ(s.entries(), 0u);
  mla::io::write_file_atomically(out, "{\"a\": 1}\n");
  mla::io::write_file_atomically(out, "{\"a\": 2}\n", /*durable=*/true);  // replaces
  EXPECT_EQ(slurp(out), "{\"a\": 2}\n");
  EXPECT_EQ(s.entries(), 1u);
}

TEST(AtomicFile, AFailedWriteNamesTheTemporaryAndTheReason) {
  Scratch s;
  try {
    mla::io::write_file_atomically(s.root / "no-such-dir" / "x.json", "{}");
    ADD_FAILURE() << "expected an error";
  } catch (const mla::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(".x.json.tmp-"), std::string::npos) << what;
    EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
  }
  EXPECT_EQ(s.entries(), 0u);
}
