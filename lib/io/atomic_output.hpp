#pragma once
// Outputs written under a temporary name beside their destination and renamed into place only
// when complete: a crash or a failed check leaves nothing that looks complete. The one home of
// temp-and-rename: AtomicDirectory (mla-convert, mla-synth), AtomicFile (safetensors files, the
// shard index, HDF5 files through h5::write_atomically, small text files).
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace mla::io {

// A temporary left beside `final_path` by a writer that died before renaming it into place:
// ".NAME.tmp-PID-..." (directories of AtomicDirectory, files of AtomicFile; also the older
// ".NAME.tmpPID") or ".NAME.old-PID-..." (a previous output moved aside by commit()).
struct StaleTemporary {
  std::filesystem::path path;
  long pid = 0;
  uint64_t bytes = 0;
  bool removed = false;
  std::string note;  // why it was kept, when it was
};

// Finds the temporaries of `final_path` whose writing process no longer exists and removes
// them, logging each with its size (spdlog warn). Temporaries of a live process are left
// alone (another run may be writing the same output). An ".old-" directory is removed only
// when `final_path` exists (otherwise it is the only copy of the previous output: kept, and
// the note says how to restore it). Called by AtomicDirectory and AtomicFile before they
// create their own temporary, so a rerun after a kill reclaims the space.
std::vector<StaleTemporary> remove_stale_temporaries(const std::filesystem::path& final_path);

// ".NAME<tag>PID-COUNTER-RANDOM" beside `final_path`: unique per process and call.
std::filesystem::path temporary_sibling(const std::filesystem::path& final_path, const char* tag);

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

// One file: the caller writes tmp_path() (which does not exist yet), then commit() renames it
// to final_path(). Destroyed uncommitted, the temporary is removed. Durability is the caller's
// (fsync its descriptor, or leave it to an enclosing AtomicDirectory::commit()).
class AtomicFile {
 public:
  explicit AtomicFile(std::filesystem::path final_path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::filesystem::path& tmp_path() const { return tmp_; }
  const std::filesystem::path& final_path() const { return final_; }
  // Renames the temporary over final_path() (replacing a file there). mla::Error naming both
  // paths and the reason when the rename fails.
  void commit();

 private:
  std::filesystem::path final_;
  std::filesystem::path tmp_;
  bool committed_ = false;
};

// `bytes` written to `path` through an AtomicFile; `durable`: fsync before the rename. Errors
// name the temporary and errno's reason (ENOSPC, EDQUOT, EROFS, ...): the operator needs it to act.
void write_file_atomically(const std::filesystem::path& path, std::string_view bytes, bool durable = false);

}  // namespace mla::io
