#pragma once
// An output directory written under a temporary name beside its destination and renamed
// into place only by commit(): a crash or a failed check leaves nothing that looks complete.
#include <filesystem>
#include <vector>

namespace mla::io {

class AtomicDirectory {
 public:
  // Fails (mla::Error) if `final_path` exists (unless overwrite; a non-directory is never
  // replaced), or if it is one of `inputs`, lies inside one, or contains one: replacing it
  // would destroy what is being read.
  explicit AtomicDirectory(std::filesystem::path final_path, bool overwrite = false,
                           const std::vector<std::filesystem::path>& inputs = {});
  ~AtomicDirectory();  // removes the temporary directory unless committed
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  const std::filesystem::path& tmp_path() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }
  // fsyncs every file and directory under tmp_path() (writers need not fsync their own
  // files), then renames it to final_path() and fsyncs the parent.
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool overwrite_ = false;
  bool committed_ = false;
};

}  // namespace mla::io
