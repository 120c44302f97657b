#pragma once
// calibration/ reads captures through io::CaptureReader and io::SequencePrefetch (io/capture.hpp)
// under their own names. This one alias remains because tests/fuzz/fuzz_capture_h5.cpp still
// spells the split reader calib::Capture; the file goes when that target names io::CaptureReader.
#include "io/capture.hpp"

namespace mla::calib {

using Capture = io::CaptureReader;

}  // namespace mla::calib
