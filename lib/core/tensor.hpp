#pragma once
// Dense tensors: a non-owning typed view of bytes (what the safetensors reader hands out,
// zero-copy into the mmap), and float64 row-major matrices for the reference math.
#include <Eigen/Dense>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace mla {

using Shape = std::vector<int64_t>;

// Row-major float64 matrix: the layout of PyTorch/safetensors weights ([out, in]).
using MatrixR = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using VectorD = Eigen::VectorXd;

inline int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
std::string shape_to_string(const Shape& s);  // "[576, 7168]"

// A view of one tensor's bytes; valid while the owner (mmap, buffer) lives.
struct TensorView {
  DType dtype{};
  Shape shape;
  std::span<const std::byte> bytes;
  int64_t numel() const { return shape_numel(shape); }
  double at(size_t i) const { return load_as_double(dtype, bytes.data(), i); }
};

// An owning tensor (for writing): dtype, shape and its raw little-endian bytes.
struct OwnedTensor {
  std::string name;
  DType dtype{};
  Shape shape;
  std::vector<std::byte> bytes;
  TensorView view() const { return {dtype, shape, bytes}; }
};

// Converts a view of any float/int dtype to float64 (row-major, same shape).
std::vector<double> to_f64(const TensorView& v);
// Encodes float64 values into `dtype` (round to nearest even).
OwnedTensor from_f64(std::string name, DType dtype, Shape shape, std::span<const double> values);

}  // namespace mla
