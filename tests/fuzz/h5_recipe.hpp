#pragma once
// Shared by the structure-aware HDF5 fuzz targets (fuzz_calib_h5_recipe, fuzz_capture_h5_recipe;
// docs/fuzzing.md). The fuzz input is not the file: it is decoded (FuzzedDataProvider) into a
// recipe, and libhdf5 itself writes a well-formed file from it (core driver: built in memory,
// written in one go on close to the per-process scratch file in /dev/shm, which the readers
// open by path). So the metadata is always valid and the adversarial part is the content:
// which objects exist, their kinds, ranks, extents, element types, layouts, fill values and
// values. Every choice's index 0 is the valid one, so an empty input is a valid file.
//
// Each dataset the recipe writes remembers the values a reader converting it to double must
// see (h5_recipe_dataset.hpp, DsSpec::stored: after encoding into the element type, or the
// fill value when no data was written); the targets' oracles compare against them.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_hdf5_common.hpp"
#include "io/capture.hpp"  // make_bf16_h5_type

namespace fuzz::h5r {

// Element types a recipe may store. F64 is what calib.h5 holds, F32/BF16 what captures hold.
enum class Elem : uint8_t { F64, F32, BF16, F16, F32BE, I32, I64, U8, Str, kCount };

inline const char* elem_name(Elem e) {
  static const char* n[] = {"f64", "f32", "bf16", "f16", "f32be", "i32", "i64", "u8", "str"};
  return n[static_cast<int>(e)];
}
inline size_t elem_bytes(Elem e) {
  switch (e) {
    case Elem::F64: case Elem::I64: return 8;
    case Elem::F32: case Elem::F32BE: case Elem::I32: case Elem::Str: return 4;
    case Elem::BF16: case Elem::F16: return 2;
    default: return 1;
  }
}
inline bool is_float(Elem e) { return e <= Elem::F32BE; }
inline bool is_numeric(Elem e) { return e != Elem::Str; }

// A new HDF5 type id (caller closes) for the element type, as the file stores it.
inline hid_t make_type(Elem e) {
  switch (e) {
    case Elem::F64: return H5Tcopy(H5T_IEEE_F64LE);
    case Elem::F32: return H5Tcopy(H5T_IEEE_F32LE);
    case Elem::BF16: return mla::io::make_bf16_h5_type();
    case Elem::F16: {
      const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      H5Tset_fields(t, 15, 10, 5, 0, 10);
      H5Tset_offset(t, 0);
      H5Tset_precision(t, 16);
      H5Tset_size(t, 2);
      H5Tset_ebias(t, 15);
      return t;
    }
    case Elem::F32BE: return H5Tcopy(H5T_IEEE_F32BE);
    case Elem::I32: return H5Tcopy(H5T_STD_I32LE);
    case Elem::I64: return H5Tcopy(H5T_STD_I64LE);
    case Elem::U8: return H5Tcopy(H5T_STD_U8LE);
    default: {
      const hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, 4);
      return t;
    }
  }
}

// IEEE half from double by truncation (the oracle uses the decoded bits, so rounding is moot).
inline uint16_t half_bits(double x) {
  if (std::isnan(x)) return 0x7e00;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(x);
  if (a >= 65536.0) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -24)) return sign;
  int e;
  const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  if (e - 1 < -14) return sign | static_cast<uint16_t>(a / std::ldexp(1.0, -24));  // subnormal
  return sign | static_cast<uint16_t>((e - 1 + 15) << 10) | static_cast<uint16_t>((m * 2 - 1) * 1024);
}
inline double half_value(uint16_t b) {
  const int e = (b >> 10) & 0x1f, m = b & 0x3ff;
  const double s = (b & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? NAN : s * INFINITY;
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1024 + m, e - 25);
}

// Encodes `v` into the element type's bytes (little-endian unless F32BE) and returns, through
// `stored`, the value each element then holds as a double.
inline std::vector<unsigned char> encode(Elem e, const std::vector<double>& v, std::vector<double>& stored) {
  const size_t n = elem_bytes(e);
  std::vector<unsigned char> out(v.size() * n);
  stored.resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    unsigned char* p = out.data() + i * n;
    const double x = v[i];
    auto clamp_int = [&](double lo, double hi) { return std::isnan(x) ? 0.0 : std::fmin(std::fmax(std::trunc(x), lo), hi); };
    switch (e) {
      case Elem::F64: std::memcpy(p, &x, 8); stored[i] = x; break;
      case Elem::F32: case Elem::F32BE: {
        const float f = static_cast<float>(std::isfinite(x) && std::fabs(x) > 3e38 ? std::copysign(INFINITY, x) : x);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        if (e == Elem::F32BE) u = __builtin_bswap32(u);
        std::memcpy(p, &u, 4);
        stored[i] = f;
        break;
      }
      case Elem::BF16: {
        float f = static_cast<float>(std::isfinite(x) && std::fabs(x) > 3e38 ? std::copysign(INFINITY, x) : x);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        uint16_t b = static_cast<uint16_t>(u >> 16);  // truncation
        if (std::isnan(f)) b = 0x7fc0;
        std::memcpy(p, &b, 2);
        stored[i] = mla::bf16_to_float(b);
        break;
      }
      case Elem::F16: {
        const uint16_t b = half_bits(x);
        std::memcpy(p, &b, 2);
        stored[i] = half_value(b);
        break;
      }
      case Elem::I32: { const int32_t k = static_cast<int32_t>(clamp_int(-2147483648.0, 2147483647.0)); std::memcpy(p, &k, 4); stored[i] = k; break; }
      case Elem::I64: { const int64_t k = static_cast<int64_t>(clamp_int(-9.2e18, 9.2e18)); std::memcpy(p, &k, 8); stored[i] = static_cast<double>(k); break; }
      case Elem::U8: { const uint8_t k = static_cast<uint8_t>(clamp_int(0, 255)); *p = k; stored[i] = k; break; }
      default: std::memcpy(p, "x1.0", 4); stored[i] = NAN; break;  // not convertible at all
    }
  }
  return out;
}

// Values with adversarial content: `n` copies of a valid pattern `base`, then, by the fuzzer's
// choice, one element replaced by NaN, +-Inf, a huge, negative, zero, tiny or nudged value, or
// every element taken from the input's raw bytes.
inline void mutate_values(FuzzedDataProvider& fdp, std::vector<double>& v, bool& changed) {
  const int mode = fdp.ConsumeIntegralInRange<int>(0, 11);
  if (mode == 0 || v.empty()) return;
  changed = true;
  if (mode == 11) {
    for (auto& x : v) x = fdp.ConsumeFloatingPoint<double>();
    return;
  }
  const size_t i = fdp.ConsumeIntegralInRange<size_t>(0, v.size() - 1);
  static const double special[] = {NAN, INFINITY, -INFINITY, 1e308, -1.0, 0.0, 4.9e-324, 1e-7, 1e-5, 3.5e38};
  if (mode == 8 || mode == 9) v[i] += special[mode - 1];  // nudged: within / beyond a 1e-6 tolerance
  else v[i] = mode == 5 ? -std::fabs(v[i]) - 1.0 : special[mode - 1];
}

// An in-memory HDF5 file built with the C API (core driver, backing store off).
class Builder {
 public:
  // libver: 0 = the library default (earliest), 1 = latest (v1.10 objects: other chunk indexes).
  explicit Builder(int libver) {
    // Each H5Fopen callocs a metadata cache of ~0.5 MB. libhdf5 returns it to malloc on close
    // (its free lists are capped), and under ASan every such block is a fresh mmap: unlimited
    // free lists let the library reuse them (2.3x the executions per second). Only the
    // library's allocation strategy changes, not what the readers do.
    // The library's error stack printing: refused recipe objects are expected (silenced once).
    static const bool once = H5set_free_list_limits(-1, -1, -1, -1, -1, -1) >= 0 &&
                             H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0;
    (void)once;
    fapl_ = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_core(fapl_, 64 * 1024, 1);  // in memory; written to the scratch file on close
    if (libver == 1) H5Pset_libver_bounds(fapl_, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    file_ = H5Fcreate(scratch_file().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl_);
    if (file_ < 0) std::abort();  // the harness, not the reader
  }
  ~Builder() {
    if (file_ >= 0) H5Fclose(file_);
    H5Pclose(fapl_);
  }
  Builder(const Builder&) = delete;
  Builder& operator=(const Builder&) = delete;

  hid_t file() const { return file_; }

  bool group(const std::string& path) {
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t g = H5Gcreate2(file_, path.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Pclose(lcpl);
    if (g < 0) return false;
    H5Gclose(g);
    return true;
  }

  // A soft link `path` -> `target` (dangling when the target does not exist).
  bool soft_link(const std::string& target, const std::string& path) {
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const herr_t st = H5Lcreate_soft(target.c_str(), file_, path.c_str(), lcpl, H5P_DEFAULT);
    H5Pclose(lcpl);
    return st >= 0;
  }

  struct Layout {
    int kind = 0;            // 0 contiguous, 1 chunked whole, 2 chunked one row, 3 chunked + unlimited dim 0,
                             // 4 chunked one row + deflate, 5 compact
    bool write = true;       // false: no data written, readers see the fill value
    bool nan_fill = false;   // fill value NaN (float types) instead of 0
  };

  // Creates dataset `path` (intermediate groups too) with the given element type, extent,
  // layout and raw bytes (row-major, `elem_bytes(e)` each). False when HDF5 refuses the
  // combination (e.g. compact storage too large); the recipe then records it as absent.
  bool dataset(const std::string& path, Elem e, const std::vector<uint64_t>& dims, const Layout& lay,
               const std::vector<unsigned char>& bytes) {
    const hid_t type = make_type(e);
    std::vector<hsize_t> d(dims.begin(), dims.end()), maxd = d, chunk = d;
    bool chunked = lay.kind >= 1 && lay.kind <= 4 && !d.empty();
    if (chunked) {
      for (auto& c : chunk) c = std::max<hsize_t>(c, 1);
      if (lay.kind == 2 || lay.kind == 4) chunk[0] = 1;
      if (lay.kind == 3) {
        maxd[0] = H5S_UNLIMITED;
        chunk[0] = std::min<hsize_t>(chunk[0], 4);  // a huge extent (2^33 rows) in small chunks
      }
    }
    const hid_t space = d.empty() ? H5Screate(H5S_SCALAR)
                                  : H5Screate_simple(static_cast<int>(d.size()), d.data(), maxd.data());
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_obj_track_times(dcpl, 0);
    if (chunked) {
      H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
      if (lay.kind == 4) H5Pset_deflate(dcpl, 1);
    } else if (lay.kind == 5) {
      H5Pset_layout(dcpl, H5D_COMPACT);
    }
    if (lay.nan_fill && is_float(e)) {
      const double nan = NAN;
      H5Pset_fill_value(dcpl, H5T_NATIVE_DOUBLE, &nan);
    }
    const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    const hid_t ds = H5Dcreate2(file_, path.c_str(), type, space, lcpl, dcpl, H5P_DEFAULT);
    bool ok = ds >= 0;
    if (ok && lay.write && !bytes.empty()) ok = H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) >= 0;
    if (ds >= 0) H5Dclose(ds);
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Tclose(type);
    if (!ok && ds >= 0) H5Ldelete(file_, path.c_str(), H5P_DEFAULT);
    return ok;
  }

  // String attribute on the object at `obj`: fixed-length NUL-padded (the project's writers)
  // or variable-length (h5py's).
  void attr_string(const std::string& obj, const std::string& name, const std::string& value, bool vlen) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    if (vlen) H5Tset_size(type, H5T_VARIABLE);
    else H5Tset_size(type, std::max<size_t>(value.size(), 1));
    H5Tset_strpad(type, H5T_STR_NULLPAD);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate_by_name(file_, obj.c_str(), name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
      if (vlen) {
        const char* p = value.c_str();
        H5Awrite(a, type, &p);
      } else {
        std::string padded = value;
        padded.resize(std::max<size_t>(value.size(), 1), '\0');
        H5Awrite(a, type, padded.data());
      }
      H5Aclose(a);
    }
    H5Sclose(space);
    H5Tclose(type);
  }

  // Numeric scalar attribute (stored as `file_type`, written from a double or an int64).
  void attr_number(const std::string& obj, const std::string& name, hid_t file_type, double dv, int64_t iv, bool as_int) {
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t a = H5Acreate_by_name(file_, obj.c_str(), name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (a >= 0) {
      if (as_int) H5Awrite(a, H5T_NATIVE_INT64, &iv);
      else H5Awrite(a, H5T_NATIVE_DOUBLE, &dv);
      H5Aclose(a);
    }
    H5Sclose(space);
  }

  // Closes the file: the core driver writes the whole image to the scratch file in one go
  // (H5Fget_file_image is not used: libhdf5 1.10.8 returns images of v1.10-format files whose
  // superblock checksum no longer matches).
  const std::filesystem::path& write_image() {
    if (H5Fclose(file_) < 0) std::abort();
    file_ = H5I_INVALID_HID;
    return scratch_file();
  }

 private:
  hid_t fapl_ = H5I_INVALID_HID;
  hid_t file_ = H5I_INVALID_HID;
};

// The string an attribute reader returns: the value up to its first NUL.
inline std::string as_read(const std::string& s) { return s.substr(0, s.find('\0')); }

// A recipe's string attribute: present or not, fixed or variable length, or of a wrong type.
struct StrAttr {
  enum Kind { Fixed, Vlen, Missing, Integer } kind = Fixed;
  std::string value;
};

// Picks a string attribute: index 0 is `valid` (fixed-length); others are the same value as a
// variable-length string, a missing attribute, an integer attribute, or another string (empty,
// a prefix, with a trailing space or NUL, or raw input bytes).
inline StrAttr pick_string_attr(FuzzedDataProvider& fdp, const std::string& valid, bool& changed) {
  StrAttr a;
  a.value = valid;
  switch (fdp.ConsumeIntegralInRange<int>(0, 8)) {
    case 0: return a;
    case 1: a.kind = StrAttr::Vlen; return a;  // still valid
    case 2: a.kind = StrAttr::Missing; break;
    case 3: a.kind = StrAttr::Integer; break;
    case 4: a.value = ""; break;
    case 5: a.value = valid.substr(0, valid.size() / 2); break;
    case 6: a.value = valid + " "; break;
    case 7: a.value = valid + std::string(1, '\0') + "x"; return a;  // reads back as `valid`
    default: a.value = fdp.ConsumeRandomLengthString(16); a.kind = fdp.ConsumeBool() ? StrAttr::Vlen : StrAttr::Fixed; break;
  }
  changed = true;
  return a;
}

inline void write_string_attr(Builder& b, const std::string& obj, const std::string& name, const StrAttr& a) {
  if (a.kind == StrAttr::Missing) return;
  if (a.kind == StrAttr::Integer) {
    b.attr_number(obj, name, H5T_STD_I64LE, 0, 7, true);
    return;
  }
  b.attr_string(obj, name, a.value, a.kind == StrAttr::Vlen);
}

// Whether a reader of this attribute gets `want` back.
inline bool reads_as(const StrAttr& a, const std::string& want) {
  return (a.kind == StrAttr::Fixed || a.kind == StrAttr::Vlen) && as_read(a.value) == want;
}

}  // namespace fuzz::h5r
