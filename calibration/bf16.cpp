#include "calibration/bf16.hpp"

#include "core/error.hpp"

namespace mla::calib {

const char* stored_type_name(StoredType t) {
  switch (t) {
    case StoredType::F32: return "float32";
    case StoredType::BF16: return "bfloat16";
    default: return "float (converted by HDF5)";
  }
}

hid_t make_bf16_h5_type() {
  // From IEEE float32 LE: the fields first (they must fit the current 32-bit precision), then
  // precision and size down to 16 bits, then the exponent bias.
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0 || H5Tset_fields(t, 15, 7, 8, 0, 7) < 0 || H5Tset_offset(t, 0) < 0 || H5Tset_precision(t, 16) < 0 ||
      H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 127) < 0) {
    if (t >= 0) H5Tclose(t);
    throw Error("HDF5: cannot build the bfloat16 datatype");
  }
  return t;
}

bool classify_h5_float_type(hid_t ft, StoredType& out, std::string* description) {
  const H5T_class_t cls = H5Tget_class(ft);
  const std::size_t size = H5Tget_size(ft);
  if (cls != H5T_FLOAT) {
    if (description) {
      const char* name = cls == H5T_INTEGER ? "integer" : cls == H5T_STRING ? "string" : cls == H5T_COMPOUND ? "compound" : "non-float";
      *description = std::string(name) + " of " + std::to_string(size) + " bytes";
    }
    return false;
  }
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  H5Tget_fields(ft, &spos, &epos, &esize, &mpos, &msize);
  const std::size_t ebias = H5Tget_ebias(ft);
  const bool le = H5Tget_order(ft) == H5T_ORDER_LE;
  if (size == 4 && le && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23 && ebias == 127) {
    out = StoredType::F32;
  } else if (size == 2 && le && spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && ebias == 127) {
    out = StoredType::BF16;
  } else {
    out = StoredType::OTHER;
  }
  if (description) {
    *description = out == StoredType::OTHER
        ? "float of " + std::to_string(size) + " bytes (sign " + std::to_string(spos) + ", exponent " +
              std::to_string(esize) + " bits, mantissa " + std::to_string(msize) + " bits, " +
              (le ? "little" : "big") + "-endian)"
        : std::string(stored_type_name(out));
  }
  return true;
}

}  // namespace mla::calib
