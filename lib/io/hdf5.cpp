#include "io/hdf5.hpp"

#include "io/atomic_output.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <unistd.h>

namespace mla::io::h5 {
namespace {

// The library's own error stack printing is noise next to our messages; silence it once.
void silence_hdf5_errors() {
  static const bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

[[noreturn]] void fail(const std::string& file, const std::string& path, const std::string& what) {
  throw InputError(file + ": " + (path.empty() ? std::string("/") : path) + ": " + what);
}

hid_t check(hid_t id, const std::string& file, const std::string& path, const char* what) {
  if (id < 0) fail(file, path, what);
  return id;
}

void check_status(herr_t st, const std::string& file, const std::string& path, const char* what) {
  if (st < 0) fail(file, path, what);
}

std::string dims_string(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Creation property lists without modification times: byte-identical output for equal content.
Handle untimed_plist(hid_t cls) {
  Handle p(H5Pcreate(cls), H5Pclose);
  H5Pset_obj_track_times(p.get(), 0);
  return p;
}

Handle open_dataspace(hid_t dset) { return Handle(H5Dget_space(dset), H5Sclose); }

Dims space_dims(hid_t space) {
  const int nd = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> d(static_cast<size_t>(std::max(nd, 0)));
  if (nd > 0) H5Sget_simple_extent_dims(space, d.data(), nullptr);
  return Dims(d.begin(), d.end());
}

}  // namespace

std::string layer_group_name(int64_t layer) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "layer_%02lld", static_cast<long long>(layer));
  return buf;
}

std::string Group::child_path(const std::string& name) const {
  return (path_ == "/" || path_.empty() ? "/" : path_ + "/") + name;
}

bool Group::exists(const std::string& name) const {
  silence_hdf5_errors();
  // H5Lexists fails on a missing intermediate: walk the path one link at a time.
  std::string prefix;
  size_t start = 0;
  while (start <= name.size()) {
    const size_t slash = name.find('/', start);
    const std::string part = name.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(h_.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return true;
}

Group Group::create_group(const std::string& name) {
  silence_hdf5_errors();
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Handle gcpl = untimed_plist(H5P_GROUP_CREATE);
  hid_t g = H5Gcreate2(h_.get(), name.c_str(), lcpl.get(), gcpl.get(), H5P_DEFAULT);
  check(g, file_, child_path(name), "cannot create group (does it exist already?)");
  return Group(Handle(g, H5Gclose), file_, child_path(name));
}

Group Group::open_group(const std::string& name) const {
  silence_hdf5_errors();
  if (!exists(name)) fail(file_, child_path(name), "group not found");
  hid_t g = H5Gopen2(h_.get(), name.c_str(), H5P_DEFAULT);
  check(g, file_, child_path(name), "not a group");
  return Group(Handle(g, H5Gclose), file_, child_path(name));
}

Group Group::require_group(const std::string& name) {
  return exists(name) ? open_group(name) : create_group(name);
}

std::vector<std::string> Group::children() const {
  silence_hdf5_errors();
  std::vector<std::string> names;
  auto cb = [](hid_t, const char* n, const H5L_info_t*, void* out) -> herr_t {
    static_cast<std::vector<std::string>*>(out)->emplace_back(n);
    return 0;
  };
  check_status(H5Literate(h_.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, cb, &names), file_, path_,
               "cannot list group");
  std::sort(names.begin(), names.end());
  return names;
}

template <typename T>
Dataset Group::create(const std::string& name, const Dims& dims, uint64_t chunk_rows) {
  silence_hdf5_errors();
  const std::vector<hsize_t> hd(dims.begin(), dims.end());
  Handle space(hd.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr),
               H5Sclose);
  check(space.get(), file_, child_path(name), "cannot create dataspace");
  Handle dcpl = untimed_plist(H5P_DATASET_CREATE);
  if (chunk_rows > 0 && !hd.empty() && hd[0] > 0) {
    std::vector<hsize_t> chunk = hd;
    chunk[0] = std::min<hsize_t>(chunk_rows, hd[0]);
    for (auto& c : chunk) c = std::max<hsize_t>(c, 1);
    check_status(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), file_,
                 child_path(name), "cannot set chunking");
  }
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  hid_t d = H5Dcreate2(h_.get(), name.c_str(), native_type<T>(), space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT);
  check(d, file_, child_path(name), "cannot create dataset (does it exist already?)");
  return Dataset(Handle(d, H5Dclose), file_, child_path(name));
}

template <typename T>
Dataset Group::write(const std::string& name, const Dims& dims, const T* data, uint64_t chunk_rows) {
  Dataset ds = create<T>(name, dims, chunk_rows);
  const uint64_t rows = dims.empty() ? 1 : dims[0];
  if (dims.empty()) {
    hid_t id = H5Dopen2(h_.get(), name.c_str(), H5P_DEFAULT);
    Handle h(id, H5Dclose);
    check_status(H5Dwrite(h.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), file_, child_path(name),
                 "write failed");
  } else if (rows > 0) {
    ds.write_rows<T>(0, rows, data);
  }
  return ds;
}

Dataset Group::open(const std::string& name) const {
  silence_hdf5_errors();
  if (!exists(name)) fail(file_, child_path(name), "dataset not found");
  hid_t d = H5Dopen2(h_.get(), name.c_str(), H5P_DEFAULT);
  check(d, file_, child_path(name), "not a dataset");
  return Dataset(Handle(d, H5Dclose), file_, child_path(name));
}

template <typename T>
std::vector<T> Group::read(const std::string& name, Dims* dims) const {
  Dataset ds = open(name);
  const Dims d = ds.dims();
  if (dims) *dims = d;
  if (d.empty()) {
    std::vector<T> out(1);
    hid_t id = H5Dopen2(h_.get(), name.c_str(), H5P_DEFAULT);
    Handle h(id, H5Dclose);
    check_status(H5Dread(h.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), file_,
                 child_path(name), "read failed");
    return out;
  }
  return ds.read_rows<T>(0, d[0]);
}

Dims Dataset::dims() const {
  Handle space = open_dataspace(h_.get());
  check(space.get(), file_, path_, "cannot read dataspace");
  return space_dims(space.get());
}

Dataset::RowSlab Dataset::select_rows(uint64_t row0, uint64_t rows) const {
  silence_hdf5_errors();
  RowSlab slab;
  slab.file_space = open_dataspace(h_.get());
  const Dims d = space_dims(slab.file_space.get());
  if (d.empty()) fail(file_, path_, "scalar dataset has no rows");
  if (row0 + rows > d[0] || row0 + rows < row0)
    fail(file_, path_, "rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) + ") out of range for shape " +
                           dims_string(d));
  for (size_t i = 1; i < d.size(); ++i) slab.row_elems *= d[i];
  if (rows == 0) return slab;
  std::vector<hsize_t> start(d.size(), 0), count(d.begin(), d.end());
  start[0] = row0;
  count[0] = rows;
  check_status(H5Sselect_hyperslab(slab.file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
               file_, path_, "cannot select rows");
  slab.mem_space = Handle(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
  return slab;
}

template <typename T>
std::vector<T> Dataset::read_rows(uint64_t row0, uint64_t rows) const {
  const RowSlab slab = select_rows(row0, rows);
  std::vector<T> out(rows * slab.row_elems);
  if (rows == 0) return out;
  check_status(H5Dread(h_.get(), native_type<T>(), slab.mem_space.get(), slab.file_space.get(), H5P_DEFAULT, out.data()),
               file_, path_, "read failed (type not convertible?)");
  return out;
}

template <typename T>
void Dataset::write_rows(uint64_t row0, uint64_t rows, const T* data) {
  const RowSlab slab = select_rows(row0, rows);
  if (rows == 0) return;
  check_status(H5Dwrite(h_.get(), native_type<T>(), slab.mem_space.get(), slab.file_space.get(), H5P_DEFAULT, data),
               file_, path_, "write failed");
}

// ---- attributes ----

void Group::set_attr(const std::string& name, const std::string& value) {
  silence_hdf5_errors();
  if (H5Aexists(h_.get(), name.c_str()) > 0) H5Adelete(h_.get(), name.c_str());
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), std::max<size_t>(value.size(), 1));
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(h_.get(), name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check(a.get(), file_, path_ + "@" + name, "cannot create attribute");
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  check_status(H5Awrite(a.get(), type.get(), padded.data()), file_, path_ + "@" + name, "cannot write attribute");
}

template <typename T>
static void set_numeric_attr(hid_t obj, const std::string& file, const std::string& path, const std::string& name,
                             T value) {
  silence_hdf5_errors();
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check(a.get(), file, path + "@" + name, "cannot create attribute");
  check_status(H5Awrite(a.get(), native_type<T>(), &value), file, path + "@" + name, "cannot write attribute");
}

void Group::set_attr(const std::string& name, int64_t value) { set_numeric_attr(h_.get(), file_, path_, name, value); }
void Group::set_attr(const std::string& name, double value) { set_numeric_attr(h_.get(), file_, path_, name, value); }

bool Group::has_attr(const std::string& name) const {
  silence_hdf5_errors();
  return H5Aexists(h_.get(), name.c_str()) > 0;
}

std::string Group::attr_string(const std::string& name) const {
  silence_hdf5_errors();
  if (!has_attr(name)) fail(file_, path_, "missing attribute '" + name + "'");
  Handle a(H5Aopen(h_.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  check(a.get(), file_, path_ + "@" + name, "cannot open attribute");
  Handle type(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) fail(file_, path_ + "@" + name, "attribute is not a string");
  if (H5Tis_variable_str(type.get()) > 0) {
    // Written by h5py as variable-length strings.
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
    char* ptr = nullptr;
    check_status(H5Aread(a.get(), mem.get(), &ptr), file_, path_ + "@" + name, "cannot read attribute");
    std::string out = ptr ? ptr : "";
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, &ptr);
    return out;
  }
  const size_t n = H5Tget_size(type.get());
  std::string buf(n, '\0');
  check_status(H5Aread(a.get(), type.get(), buf.data()), file_, path_ + "@" + name, "cannot read attribute");
  buf.erase(std::find(buf.begin(), buf.end(), '\0'), buf.end());
  return buf;
}

template <typename T>
static T numeric_attr(hid_t obj, const std::string& file, const std::string& path, const std::string& name) {
  silence_hdf5_errors();
  if (H5Aexists(obj, name.c_str()) <= 0) fail(file, path, "missing attribute '" + name + "'");
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  check(a.get(), file, path + "@" + name, "cannot open attribute");
  T v{};
  check_status(H5Aread(a.get(), native_type<T>(), &v), file, path + "@" + name, "attribute is not numeric");
  return v;
}

int64_t Group::attr_int(const std::string& name) const { return numeric_attr<int64_t>(h_.get(), file_, path_, name); }
double Group::attr_double(const std::string& name) const { return numeric_attr<double>(h_.get(), file_, path_, name); }

// ---- files ----

File File::create(const std::filesystem::path& path) {
  silence_hdf5_errors();
  Handle fcpl = untimed_plist(H5P_FILE_CREATE);
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT);
  if (f < 0) throw InputError(path.string() + ": cannot create HDF5 file");
  Handle fh(f, H5Fclose);
  hid_t g = H5Gopen2(f, "/", H5P_DEFAULT);
  if (g < 0) throw InputError(path.string() + ": cannot open root group");
  return File(std::move(fh), path, Group(Handle(g, H5Gclose), path.string(), "/"));
}

File File::open_read(const std::filesystem::path& path) {
  silence_hdf5_errors();
  if (!std::filesystem::exists(path)) throw InputError(path.string() + ": no such HDF5 file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw InputError(path.string() + ": not an HDF5 file");
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw InputError(path.string() + ": cannot open HDF5 file");
  Handle fh(f, H5Fclose);
  hid_t g = H5Gopen2(f, "/", H5P_DEFAULT);
  if (g < 0) throw InputError(path.string() + ": cannot open root group");
  return File(std::move(fh), path, Group(Handle(g, H5Gclose), path.string(), "/"));
}

void File::flush() { H5Fflush(file_.get(), H5F_SCOPE_GLOBAL); }

// Explicit instantiations for the element types we support.
#define MLA_H5_INSTANTIATE(T)                                                                        \
  template Dataset Group::write<T>(const std::string&, const Dims&, const T*, uint64_t);            \
  template Dataset Group::create<T>(const std::string&, const Dims&, uint64_t);                     \
  template std::vector<T> Group::read<T>(const std::string&, Dims*) const;                          \
  template std::vector<T> Dataset::read_rows<T>(uint64_t, uint64_t) const;                          \
  template void Dataset::write_rows<T>(uint64_t, uint64_t, const T*);
MLA_H5_INSTANTIATE(float)
MLA_H5_INSTANTIATE(double)
MLA_H5_INSTANTIATE(int32_t)
MLA_H5_INSTANTIATE(int64_t)
MLA_H5_INSTANTIATE(uint8_t)
MLA_H5_INSTANTIATE(uint16_t)
#undef MLA_H5_INSTANTIATE

void write_atomically(const std::filesystem::path& path, const std::function<void(File&)>& fill) {
  AtomicFile out(path);  // removed again unless committed
  {
    File file = File::create(out.tmp_path());
    fill(file);
    file.flush();
  }
  out.commit();
}

}  // namespace mla::io::h5
