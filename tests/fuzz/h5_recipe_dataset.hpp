#pragma once
// One dataset of a recipe (h5_recipe.hpp): the object at a path may be the wanted dataset, a
// dataset of another element type / extent / layout / fill, or no dataset at all (missing, a
// group, a dangling soft link); its values may be mutated. Records what was written.
#include "h5_recipe.hpp"

namespace fuzz::h5r {

struct DsSpec {
  enum Kind { Dataset, Missing, Group, Dangling } kind = Dataset;
  Elem elem = Elem::F64;
  std::vector<uint64_t> dims;
  std::vector<double> stored;  // what a reader converting to double sees, row-major (empty: huge extent)
  bool written = true;         // data written (else the fill value)
  bool huge = false;           // dim 0 raised to 2^33 (no data written)

  bool is_dataset() const { return kind == Dataset; }
  bool link_exists() const { return kind != Missing; }  // H5Lexists: true for groups and dangling links too
  bool all_finite() const {
    for (double x : stored)
      if (!std::isfinite(x)) return false;
    return true;
  }
  // A reader that checks this extent and converts the values to double succeeds exactly then.
  bool readable_as(const std::vector<uint64_t>& want) const {
    return kind == Dataset && dims == want && is_numeric(elem) && all_finite();
  }
};

inline uint64_t element_count(const std::vector<uint64_t>& d) {
  uint64_t n = 1;
  for (auto x : d) n *= x;
  return n;
}

// Builds the object at `path`. `want_elem`, `want_dims`, `values` (row-major, the product of
// want_dims) and `default_layout` describe the valid dataset (choice 0 everywhere).
inline DsSpec pick_dataset(FuzzedDataProvider& fdp, Builder& b, const std::string& path, Elem want_elem,
                           const std::vector<uint64_t>& want_dims, std::vector<double> values, int default_layout,
                           bool& changed) {
  DsSpec s;
  switch (fdp.ConsumeIntegralInRange<int>(0, 15)) {
    case 1: s.kind = DsSpec::Missing; break;
    case 2: s.kind = DsSpec::Group; break;
    case 3: s.kind = DsSpec::Dangling; break;
    default: break;  // mostly a dataset
  }
  if (s.kind != DsSpec::Dataset) {
    changed = true;
    if (s.kind == DsSpec::Group) b.group(path);
    if (s.kind == DsSpec::Dangling) b.soft_link("/no/such/object", path);
    return s;
  }
  const int e = fdp.ConsumeIntegralInRange<int>(0, 2 * static_cast<int>(Elem::kCount) - 1);
  s.elem = e < static_cast<int>(Elem::kCount) ? want_elem : static_cast<Elem>(e - static_cast<int>(Elem::kCount));
  s.dims = want_dims;
  const int dmut = fdp.ConsumeIntegralInRange<int>(0, 15);
  switch (dmut) {
    case 1: if (!s.dims.empty()) s.dims.pop_back(); break;
    case 2: s.dims.push_back(1); break;
    case 3: case 4:
      if (!s.dims.empty()) {
        auto& d = s.dims[fdp.ConsumeIntegralInRange<size_t>(0, s.dims.size() - 1)];
        d = dmut == 3 ? d + 1 : (d > 0 ? d - 1 : 0);
      }
      break;
    case 5: s.dims.clear(); break;  // scalar
    case 6: if (s.dims.size() >= 2) std::swap(s.dims[0], s.dims[1]); break;
    case 7: if (!s.dims.empty()) s.dims[0] = 0; break;
    case 8: if (!s.dims.empty()) { s.dims[0] = uint64_t{1} << 33; s.huge = true; } break;
    default: break;
  }
  Builder::Layout lay;
  const int l = fdp.ConsumeIntegralInRange<int>(0, 11);
  lay.kind = l <= 5 ? default_layout : l - 6;
  lay.write = !s.huge && fdp.ConsumeIntegralInRange<int>(0, 9) != 1;
  lay.nan_fill = !lay.write && fdp.ConsumeBool();
  if (s.huge) lay.kind = 3;  // chunked, unlimited: nothing allocated
  mutate_values(fdp, values, changed);
  const uint64_t n = s.huge ? 0 : element_count(s.dims);
  values.resize(n, 0.5);
  std::vector<unsigned char> bytes = encode(s.elem, values, s.stored);
  if (!lay.write) s.stored.assign(n, lay.nan_fill && is_float(s.elem) ? NAN : (s.elem == Elem::Str ? NAN : 0.0));
  s.written = lay.write;
  if (s.elem != want_elem || s.dims != want_dims || lay.kind != default_layout || !lay.write) changed = true;
  if (!b.dataset(path, s.elem, s.dims, lay, bytes)) {
    s.kind = DsSpec::Missing;
    changed = true;
  }
  return s;
}

}  // namespace fuzz::h5r
