#include "core/tensor.hpp"

#include <stdexcept>

namespace mla {

std::string shape_to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::vector<double> to_f64(const TensorView& v) {
  const auto n = static_cast<size_t>(v.numel());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = v.at(i);
  return out;
}

OwnedTensor from_f64(std::string name, DType dtype, Shape shape, std::span<const double> values) {
  const auto n = static_cast<size_t>(shape_numel(shape));
  if (values.size() != n) throw std::invalid_argument("from_f64: value count does not match shape for " + name);
  OwnedTensor t{std::move(name), dtype, std::move(shape), {}};
  t.bytes.assign((n * static_cast<size_t>(dtype_bits(dtype)) + 7) / 8, std::byte{0});
  for (size_t i = 0; i < n; ++i) store_from_double(dtype, t.bytes.data(), i, values[i]);
  return t;
}

}  // namespace mla
