#pragma once
// The tests' one scratch-directory helper: a fresh, empty directory under the system temporary
// directory, named after `tag`, the running GoogleTest test and the process id (so parallel
// CTest processes and the tests of one executable never share one), removed with everything in
// it when the object goes away.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace mla::test {

class ScratchDir {
 public:
  explicit ScratchDir(std::string_view tag = "mla_test", bool per_test = true) {
    std::string name(tag);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (per_test && info) {
      name += '_';
      name += info->name();
    }
    name += '_';
    name += std::to_string(::getpid());
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::filesystem::path& p) const { return path_ / p; }

 private:
  std::filesystem::path path_;
};

// One scratch directory for the whole test process (work shared by its tests, e.g. a converted
// model made once), created on first use (named after that call's `tag`) and removed at exit.
inline const std::filesystem::path& process_scratch_dir(std::string_view tag) {
  static const ScratchDir dir{tag, /*per_test=*/false};
  std::filesystem::create_directories(dir.path());  // again, in case a test removed it
  return dir.path();
}

}  // namespace mla::test
