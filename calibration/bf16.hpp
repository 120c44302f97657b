#pragma once
// The element types a capture may store (docs/formats/capture.md) and the HDF5 type that
// describes bfloat16: an IEEE-style float of 16 bits (sign 15, exponent 7..14 with bias 127,
// mantissa 0..6). The conversions themselves are core's bf16_to_float / float_to_bf16.
#include <hdf5.h>

#include <cstdint>
#include <string>

#include "core/dtype.hpp"

namespace mla::calib {

// How a capture dataset stores its values (little-endian in the file).
enum class StoredType : uint8_t {
  F32,   // IEEE float32 little-endian: read raw
  BF16,  // bfloat16 (the top 16 bits of a float32): read raw, widened in C++
  OTHER  // another float type (float64, big-endian float32, ...): HDF5 converts it to float32
};
const char* stored_type_name(StoredType t);
inline std::size_t stored_bytes(StoredType t) { return t == StoredType::BF16 ? 2 : 4; }

// A new HDF5 datatype describing bfloat16 (little-endian); the caller closes it (H5Tclose).
hid_t make_bf16_h5_type();
// Classifies a dataset's file type; `description` (when given) gets a readable name of the
// type for error messages. Non-float classes (integers, strings, ...) return false.
bool classify_h5_float_type(hid_t file_type, StoredType& out, std::string* description = nullptr);

}  // namespace mla::calib
