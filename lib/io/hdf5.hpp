#pragma once
// Small RAII wrapper over the HDF5 C API: files, groups, datasets (whole or by slabs along
// the first dimension, for streaming), and scalar attributes. Every failure throws
// mla::InputError naming the file and the object path.
//
// Writes are deterministic: object modification times are not recorded, so the same content
// gives a byte-identical file (calibration outputs rely on this).
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace mla::io::h5 {

// Owns one hid_t and closes it with the right H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Element types the wrapper reads and writes.
template <typename T> hid_t native_type();
template <> inline hid_t native_type<float>() { return H5T_NATIVE_FLOAT; }
template <> inline hid_t native_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> inline hid_t native_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> inline hid_t native_type<int64_t>() { return H5T_NATIVE_INT64; }
template <> inline hid_t native_type<uint8_t>() { return H5T_NATIVE_UINT8; }
template <> inline hid_t native_type<uint16_t>() { return H5T_NATIVE_UINT16; }

using Dims = std::vector<uint64_t>;

// Per-layer group name shared by the project's HDF5 schemas (captures, calib.h5): "layer_03".
std::string layer_group_name(int64_t layer);

class Dataset;

// A group (the file's root is a group too). Paths may contain '/' ("layer_00/hidden").
class Group {
 public:
  Group(Handle h, std::string file, std::string path)
      : h_(std::move(h)), file_(std::move(file)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  hid_t id() const { return h_.get(); }

  bool exists(const std::string& name) const;  // link exists (group or dataset); nested ok
  Group create_group(const std::string& name);  // creates intermediate groups too
  Group open_group(const std::string& name) const;
  Group require_group(const std::string& name);  // open or create
  std::vector<std::string> children() const;     // sorted link names

  // Whole-dataset write (contiguous, or chunked with chunk_rows rows along dim 0 when > 0).
  template <typename T>
  Dataset write(const std::string& name, const Dims& dims, const T* data, uint64_t chunk_rows = 0);
  template <typename T>
  Dataset write(const std::string& name, const std::vector<T>& data);  // 1-D
  // Creates an empty dataset to be filled by Dataset::write_rows (chunked along dim 0).
  template <typename T>
  Dataset create(const std::string& name, const Dims& dims, uint64_t chunk_rows);
  Dataset open(const std::string& name) const;
  // Reads a whole dataset converted to T; dims returned through `dims` when given.
  template <typename T>
  std::vector<T> read(const std::string& name, Dims* dims = nullptr) const;

  // Scalar attributes on this group.
  void set_attr(const std::string& name, const std::string& value);
  void set_attr(const std::string& name, const char* value) { set_attr(name, std::string(value)); }
  void set_attr(const std::string& name, int64_t value);
  void set_attr(const std::string& name, double value);
  bool has_attr(const std::string& name) const;
  std::string attr_string(const std::string& name) const;
  int64_t attr_int(const std::string& name) const;
  double attr_double(const std::string& name) const;

 private:
  std::string child_path(const std::string& name) const;
  Handle h_;
  std::string file_;
  std::string path_;
};

// One dataset; slab I/O along the first dimension lets readers stream sequence by sequence.
class Dataset {
 public:
  Dataset(Handle h, std::string file, std::string path)
      : h_(std::move(h)), file_(std::move(file)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  Dims dims() const;
  // Rows [row0, row0 + rows) of dim 0, converted to T (row-major, all other dims whole).
  template <typename T>
  std::vector<T> read_rows(uint64_t row0, uint64_t rows) const;
  template <typename T>
  void write_rows(uint64_t row0, uint64_t rows, const T* data);

 private:
  // The file dataspace with rows [row0, row0 + rows) of dim 0 selected, the matching memory
  // dataspace (invalid when rows == 0), and the elements per row. Range errors name the dataset.
  struct RowSlab {
    Handle file_space;
    Handle mem_space;
    uint64_t row_elems = 1;
  };
  RowSlab select_rows(uint64_t row0, uint64_t rows) const;

  Handle h_;
  std::string file_;
  std::string path_;
};

template <typename T>
Dataset Group::write(const std::string& name, const std::vector<T>& data) {
  return write<T>(name, Dims{data.size()}, data.data());
}

class File {
 public:
  // Truncates/creates. Writes go to `path` directly: callers that need atomicity use
  // write_atomically below.
  static File create(const std::filesystem::path& path);
  static File open_read(const std::filesystem::path& path);
  Group& root() { return root_; }
  const Group& root() const { return root_; }
  const std::filesystem::path& path() const { return path_; }
  void flush();

 private:
  File(Handle file, std::filesystem::path path, Group root)
      : file_(std::move(file)), path_(std::move(path)), root_(std::move(root)) {}
  Handle file_;
  std::filesystem::path path_;
  Group root_;
};

// Writes the HDF5 file `path` through a temporary file in the same folder (".<name>.tmp-<pid>-..."),
// after removing the temporaries of `path` left by killed runs (io::remove_stale_temporaries):
// `fill` writes into it, the file is flushed and closed, then renamed to `path`. If `fill`
// throws, the temporary file is removed and the exception propagates: `path` is never partial.
void write_atomically(const std::filesystem::path& path, const std::function<void(File&)>& fill);

}  // namespace mla::io::h5
