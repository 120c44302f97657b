#pragma once
// Lloyd-Max scalar codebooks (SPEC section 3 "Lloyd-Max", section 4 "Codebook" format).
//
// One routine serves both empirical samples and analytic densities: Lloyd iterations need
// only, for an interval [a, b), the mass P, first moment M and second moment S of the data
// in it. Samples: sort once and keep prefix sums (P, M, S exact over the sample). Densities:
// tabulate on a fine grid and integrate cumulatively (trapezoid), interpolating linearly.
// Either way an iteration costs O(levels * log n), so 1M samples fit in well under a second.
#include <cstddef>
#include <functional>
#include <vector>

namespace mla::quant {

struct Codebook {
  std::vector<double> levels;  // ascending centroids
  double mse = 0.0;            // mean squared error of nearest-level quantisation
  int iterations = 0;          // Lloyd iterations run
  bool converged = false;      // max level change fell below the tolerance
};

struct LloydOptions {
  int levels = 16;
  int max_iterations = 5000;
  double tolerance = 1e-10;  // stop when no level moves by more than this (absolute)
};

// Lloyd-Max on the samples (copied and sorted). Throws InputError on an empty sample or a
// non-finite value.
Codebook lloyd_max_samples(std::vector<double> samples, const LloydOptions& opt = {});

// Lloyd-Max on a density pdf (need not be normalised) supported on [lo, hi], tabulated on
// `grid` points.
Codebook lloyd_max_density(const std::function<double(double)>& pdf, double lo, double hi,
                           const LloydOptions& opt = {}, std::size_t grid = 400001);

// N(0, sigma^2).
Codebook lloyd_max_gaussian(double sigma, const LloydOptions& opt = {});
// A coordinate of a uniformly random unit vector in R^d: density ∝ (1 - x^2)^((d-3)/2) on
// [-1, 1], i.e. (x+1)/2 ~ Beta((d-1)/2, (d-1)/2). d >= 3.
Codebook lloyd_max_sphere_coordinate(int d, const LloydOptions& opt = {});

// Index of the nearest level (levels ascending); ties go to the lower level.
int nearest_level(const std::vector<double>& levels, double v);
// Mean squared error of nearest-level quantisation of the samples.
double codebook_mse(const std::vector<double>& levels, const std::vector<double>& samples);

}  // namespace mla::quant
