#pragma once
// The element types a capture may store and the HDF5 type that describes bfloat16 live with
// the capture format (io/capture.hpp); the conversions themselves are core's bf16_to_float /
// float_to_bf16. The calibration names for them:
#include "core/dtype.hpp"
#include "io/capture.hpp"

namespace mla::calib {

using io::classify_h5_float_type;
using io::make_bf16_h5_type;
using io::stored_bytes;
using io::stored_type_name;
using io::StoredType;

}  // namespace mla::calib
