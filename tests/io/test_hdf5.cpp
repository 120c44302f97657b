// The HDF5 wrapper: round trips, slab streaming, attributes, named errors, determinism.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <unistd.h>

#include "common/scratch_dir.hpp"
#include "io/hdf5.hpp"

namespace fs = std::filesystem;
using namespace mla::io;

namespace {
fs::path temp_file(const std::string& name) { return mla::test::process_scratch_dir("mla_h5_test") / name; }
std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_sample(const fs::path& p) {
  auto f = h5::File::create(p);
  std::vector<double> v{1.5, -2.25, 3.0, 4.0, 5.0, 6.0};
  f.root().write<double>("layer_00/m", {2, 3}, v.data());
  f.root().set_attr("schema", "mla-test/1");
  f.root().set_attr("count", int64_t{42});
  f.root().set_attr("c", 0.156);
}
}  // namespace

TEST(Hdf5, RoundTripDatasetsAndAttributes) {
  const auto p = temp_file("rt.h5");
  write_sample(p);
  auto f = h5::File::open_read(p);
  h5::Dims dims;
  auto v = f.root().read<double>("layer_00/m", &dims);
  ASSERT_EQ(dims, (h5::Dims{2, 3}));
  EXPECT_EQ(v[1], -2.25);
  EXPECT_EQ(f.root().attr_string("schema"), "mla-test/1");
  EXPECT_EQ(f.root().attr_int("count"), 42);
  EXPECT_DOUBLE_EQ(f.root().attr_double("c"), 0.156);
  EXPECT_TRUE(f.root().exists("layer_00/m"));
  EXPECT_FALSE(f.root().exists("layer_01/m"));
  EXPECT_EQ(f.root().open_group("layer_00").children(), std::vector<std::string>{"m"});
  // float read of a double dataset converts
  auto vf = f.root().read<float>("layer_00/m");
  EXPECT_FLOAT_EQ(vf[5], 6.0f);
}

TEST(Hdf5, StreamsRowsOfAChunkedDataset) {
  const auto p = temp_file("rows.h5");
  std::mt19937 rng(1);
  std::normal_distribution<float> n;
  std::vector<float> all(5 * 4 * 3);
  for (auto& x : all) x = n(rng);
  {
    auto f = h5::File::create(p);
    auto ds = f.root().create<float>("calib/layer_00/hidden", {5, 4, 3}, 1);
    for (uint64_t s = 0; s < 5; ++s) ds.write_rows<float>(s, 1, all.data() + s * 12);
  }
  auto f = h5::File::open_read(p);
  auto ds = f.root().open("calib/layer_00/hidden");
  EXPECT_EQ(ds.dims(), (h5::Dims{5, 4, 3}));
  auto rows = ds.read_rows<float>(2, 2);
  ASSERT_EQ(rows.size(), 24u);
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i], all[24 + i]);
  EXPECT_THROW(ds.read_rows<float>(4, 2), mla::InputError);
}

TEST(Hdf5, ErrorsNameFileAndPath) {
  const auto p = temp_file("err.h5");
  write_sample(p);
  auto f = h5::File::open_read(p);
  try {
    f.root().read<double>("layer_07/m");
    FAIL() << "expected an error";
  } catch (const mla::InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("err.h5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer_07/m"), std::string::npos) << msg;
  }
  EXPECT_THROW(h5::File::open_read(temp_file("missing.h5")), mla::InputError);
  std::ofstream(temp_file("garbage.h5")) << "not hdf5";
  EXPECT_THROW(h5::File::open_read(temp_file("garbage.h5")), mla::InputError);
  EXPECT_THROW(f.root().attr_string("nope"), mla::InputError);
}

TEST(Hdf5, SameContentGivesIdenticalBytes) {
  const auto a = temp_file("a.h5");
  const auto b = temp_file("b.h5");
  write_sample(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a timestamp would now differ
  write_sample(b);
  EXPECT_EQ(slurp(a), slurp(b));
}
