#pragma once
// mla-calibrate reads captures through the one capture reader, io::CaptureReader opened on a
// split against the model (lib/io/capture.hpp: validation, raw chunk reads with O_DIRECT or
// the page cache, BF16 widening, SequencePrefetch). The calibration names for it:
#include "calibration/bf16.hpp"
#include "io/capture.hpp"

namespace mla::calib {

using Capture = io::CaptureReader;
using io::CaptureInfo;
using io::IoMode;
using io::RawRows;
using io::SequencePrefetch;

}  // namespace mla::calib
