// safetensors reader/writer: round trips of every dtype, the exact byte layout the writer
// promises (checked against a file assembled by hand here), determinism, streaming
// writes, shards, and the malformed corpus (datasets/malformed/manifest.tsv).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "common/scratch_dir.hpp"
#include "io/atomic_output.hpp"
#include "io/fingerprint.hpp"
#include "io/safetensors.hpp"

namespace fs = std::filesystem;
using namespace mla;
using namespace mla::io;
using Kind = SafetensorsError::Kind;

namespace {

// a + b, appended: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.
std::string join(std::string_view a, std::string_view b) {
  std::string s(a);
  s += b;
  return s;
}

const DType kAllDtypes[] = {DType::BOOL, DType::U8, DType::I8, DType::U16, DType::I16, DType::U32,
                            DType::I32, DType::U64, DType::I64, DType::F8_E4M3, DType::F8_E5M2,
                            DType::F8_E8M0, DType::F4, DType::F16, DType::BF16, DType::F32, DType::F64};

using TempDir = mla::test::ScratchDir;

// Temporaries an io::AtomicFile for `final_path` left beside it (".NAME.tmp-PID-...").
int temporaries_of(const fs::path& final_path) {
  int n = 0;
  const std::string prefix = "." + final_path.filename().string() + ".tmp-";
  for (const auto& e : fs::directory_iterator(final_path.parent_path()))
    if (e.path().filename().string().starts_with(prefix)) ++n;
  return n;
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

void write_bytes(const fs::path& p, std::string_view s) {
  std::ofstream f(p, std::ios::binary);
  f.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// Deterministic non-trivial bytes (every byte value occurs; BOOL gets 0/1 only).
OwnedTensor patterned(std::string name, DType dtype, Shape shape, int salt) {
  OwnedTensor t{std::move(name), dtype, std::move(shape), {}};
  const uint64_t n = TensorSpec{t.name, t.dtype, t.shape}.nbytes();
  t.bytes.resize(n);
  for (uint64_t i = 0; i < n; ++i)
    t.bytes[i] = static_cast<std::byte>(dtype == DType::BOOL ? (i + salt) % 2 : (i * 37 + salt * 11 + 5) & 0xFF);
  return t;
}

// n patterned F32 tensors of shape shape_of(i), named t0, t1, ...: shared owners (what the
// streaming writer's hold keeps), plain copies (for write_safetensors' reference file), their
// specs and their total bytes.
struct PatternedSet {
  std::vector<std::shared_ptr<OwnedTensor>> owned;
  std::vector<OwnedTensor> plain;
  std::vector<TensorSpec> specs;
  uint64_t total = 0;
};
template <class ShapeOf>
PatternedSet patterned_set(int n, ShapeOf shape_of) {
  PatternedSet set;
  for (int i = 0; i < n; ++i) {
    set.owned.push_back(
        std::make_shared<OwnedTensor>(patterned(join("t", std::to_string(i)), DType::F32, shape_of(i), i)));
    const OwnedTensor& t = *set.owned.back();
    set.plain.push_back(t);
    set.specs.push_back({t.name, t.dtype, t.shape});
    set.total += t.bytes.size();
  }
  return set;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

Kind kind_from_name(const std::string& s) {
  for (int k = 0; k <= static_cast<int>(Kind::MissingTensor); ++k)
    if (SafetensorsError::kind_name(static_cast<Kind>(k)) == s) return static_cast<Kind>(k);
  throw std::runtime_error("manifest names unknown kind " + s);
}

}  // namespace

TEST(Safetensors, RoundTripsEveryDtype) {
  TempDir dir;
  std::vector<OwnedTensor> tensors;
  int salt = 0;
  for (DType d : kAllDtypes) tensors.push_back(patterned(join("t.", dtype_name(d)), d, {3, 4}, salt++));
  tensors.push_back(patterned("empty", DType::BF16, {0, 7}, 0));
  tensors.push_back(patterned("scalar", DType::F32, {}, 1));
  const auto path = dir.path() / "all.safetensors";
  write_safetensors(path, tensors, {{"producer", "test"}, {"unicode", "\xc3\xa9t\xc3\xa9"}});

  auto file = SafetensorsFile::open(path);
  EXPECT_EQ(file.header().tensors.size(), tensors.size());
  EXPECT_EQ(file.header().metadata.at("producer"), "test");
  EXPECT_EQ(file.header().metadata.at("unicode"), "\xc3\xa9t\xc3\xa9");
  const auto raw = read_bytes(path);
  for (const auto& t : tensors) {
    SCOPED_TRACE(t.name);
    ASSERT_NE(file.find(t.name), nullptr);
    const TensorView v = file.view(t.name);
    EXPECT_EQ(v.dtype, t.dtype);
    EXPECT_EQ(v.shape, t.shape);
    ASSERT_EQ(v.bytes.size(), t.bytes.size());
    if (!t.bytes.empty()) {  // memcmp of a null pointer is undefined even for 0 bytes
      EXPECT_EQ(0, std::memcmp(v.bytes.data(), t.bytes.data(), t.bytes.size()));
    }
    // Zero-copy: the view points at the tensor's offset inside the one mapping.
    const TensorInfo* info = file.find(t.name);
    EXPECT_EQ(v.bytes.data(), file.view(t.name).bytes.data());
    if (!t.bytes.empty()) {
      EXPECT_EQ(0, std::memcmp(raw.data() + 8 + file.header().header_size + info->begin, t.bytes.data(), t.bytes.size()));
    }
  }
  EXPECT_EQ(file.view("t.F4").bytes.size(), 6u);  // 12 nibbles packed
  EXPECT_EQ(file.find("absent"), nullptr);
  try {
    file.view("absent");
    FAIL() << "view of a missing tensor must throw";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(e.kind(), Kind::MissingTensor);
    EXPECT_NE(std::string(e.what()).find("'absent'"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, FloatValuesSurviveThroughF64) {
  TempDir dir;
  const std::vector<double> values = {0.0, -1.5, 3.25, 448.0, -0.125, 6.0};
  std::vector<OwnedTensor> ts;
  for (DType d : {DType::F64, DType::F32, DType::BF16, DType::F16, DType::F8_E4M3, DType::F4})
    ts.push_back(from_f64(join("v", dtype_name(d)), d, {2, 3}, values));
  write_safetensors(dir.path() / "f.safetensors", ts, {});
  auto file = SafetensorsFile::open(dir.path() / "f.safetensors");
  for (const auto& t : ts) {
    const auto got = to_f64(file.view(t.name));
    const auto want = to_f64(t.view());  // values after the dtype's own rounding
    EXPECT_EQ(got, want) << t.name;
  }
  // Every value above is exact in F64/F32/BF16/F16.
  EXPECT_EQ(to_f64(file.view("vBF16")), values);
}

// The writer's exact bytes, assembled independently: compact JSON, keys sorted, offsets
// ordered by alignment then name, padded with spaces to a multiple of 8.
TEST(Safetensors, WriterLayoutMatchesHandAssembledFile) {
  TempDir dir;
  std::vector<OwnedTensor> ts = {patterned("b", DType::U8, {3}, 1), patterned("a", DType::U8, {2}, 2),
                                 patterned("w", DType::F32, {1}, 3)};
  write_safetensors(dir.path() / "x.safetensors", ts, {{"k", "v"}});
  std::string json =
      R"({"__metadata__":{"k":"v"},"a":{"data_offsets":[4,6],"dtype":"U8","shape":[2]},)"
      R"("b":{"data_offsets":[6,9],"dtype":"U8","shape":[3]},"w":{"data_offsets":[0,4],"dtype":"F32","shape":[1]}})";
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string expected = le64(json.size()) + json;
  for (const auto* t : {&ts[2], &ts[1], &ts[0]})
    expected.append(reinterpret_cast<const char*>(t->bytes.data()), t->bytes.size());
  const auto got = read_bytes(dir.path() / "x.safetensors");
  ASSERT_EQ(got.size(), expected.size());
  EXPECT_EQ(0, std::memcmp(got.data(), expected.data(), got.size()));
  EXPECT_EQ(temporaries_of(dir.path() / "x.safetensors"), 0);
}

TEST(Safetensors, EveryTensorIsNaturallyAligned) {
  std::vector<TensorSpec> specs;
  for (DType d : kAllDtypes) specs.push_back({join("x", dtype_name(d)), d, {2, 3}});
  specs.push_back({"odd", DType::U8, {5}});
  specs.push_back({"pair", DType::F4, {2}});
  const FileLayout layout = plan_file(specs, {{"a", "b"}});
  ASSERT_EQ(layout.header_json.size() % 8, 0u);
  for (size_t i = 0; i < layout.order.size(); ++i) {
    const uint64_t align = std::max(1, dtype_bits(layout.order[i].dtype) / 8);
    EXPECT_EQ((8 + layout.header_json.size() + layout.offsets[i]) % align, 0u) << layout.order[i].name;
    if (i) {
      const uint64_t prev_align = std::max(1, dtype_bits(layout.order[i - 1].dtype) / 8);
      EXPECT_GE(prev_align, align);
      if (layout.order[i - 1].dtype == layout.order[i].dtype) {
        EXPECT_LT(layout.order[i - 1].name, layout.order[i].name);
      }
    }
  }
}

TEST(Safetensors, WritingIsDeterministic) {
  TempDir dir;
  std::vector<OwnedTensor> ts;
  int salt = 0;
  for (DType d : kAllDtypes) {
    ts.push_back(patterned(join("layer.", std::to_string(salt)), d, {2, 6}, salt));
    ++salt;
  }
  const std::map<std::string, std::string> meta = {{"z", "1"}, {"a", "2"}};
  write_safetensors(dir.path() / "one.safetensors", ts, meta);
  std::reverse(ts.begin(), ts.end());  // input order must not matter
  write_safetensors(dir.path() / "two.safetensors", ts, meta);
  EXPECT_EQ(read_bytes(dir.path() / "one.safetensors"), read_bytes(dir.path() / "two.safetensors"));
}

TEST(Safetensors, StreamingWriterAcceptsAnyOrderFromThreads) {
  TempDir dir;
  std::vector<OwnedTensor> ts;
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 64; ++i) {
    ts.push_back(patterned(join("t", std::to_string(i)), i % 2 ? DType::BF16 : DType::F32, {17, 3}, i));
    specs.push_back({ts.back().name, ts.back().dtype, ts.back().shape});
  }
  const auto path = dir.path() / "s.safetensors";
  {
    StreamingFileWriter w(path, specs, {});
    EXPECT_FALSE(fs::exists(path));  // only the temporary exists until finish()
    EXPECT_EQ(temporaries_of(path), 1);
    std::thread a([&] { for (int i = 63; i >= 0; i -= 2) w.write(ts[i].name, ts[i].bytes); });
    std::thread b([&] { for (int i = 0; i < 64; i += 2) w.write(ts[i].name, ts[i].bytes); });
    a.join();
    b.join();
    w.finish();
  }
  write_safetensors(dir.path() / "ref.safetensors", ts, {});
  EXPECT_EQ(read_bytes(path), read_bytes(dir.path() / "ref.safetensors"));
}

TEST(Safetensors, StreamingWriterHashesWhileWriting) {
  // options.hash: the digest computed from the arriving bytes equals a second pass over the
  // finished file, for writes in order, reversed, and interleaved from two threads (also with
  // empty tensors and a multi-chunk read-back); fsync_on_finish = false still renames.
  TempDir dir;
  std::vector<OwnedTensor> ts;
  std::vector<TensorSpec> specs;
  for (int i = 0; i < 48; ++i) {
    const Shape shape = i % 11 == 3 ? Shape{0, 5} : (i == 7 ? Shape{3001, 1999} : Shape{17, 3 + i % 5});
    ts.push_back(patterned(join("t", std::to_string(i)), i % 3 ? DType::BF16 : DType::F32, shape, i));
    specs.push_back({ts.back().name, ts.back().dtype, ts.back().shape});
  }
  write_safetensors(dir.path() / "ref", ts, {{"format", "pt"}});
  const auto ref = read_bytes(dir.path() / "ref");
  for (int mode = 0; mode < 6; ++mode) {
    // modes 3-5: the same with direct I/O for the large tensor (page cache where unsupported).
    const StreamingWriterOptions opts{.fsync_on_finish = false, .hash = true, .direct_io = mode >= 3};
    const auto path = dir.path() / join("h", std::to_string(mode));
    std::string digest;
    {
      StreamingFileWriter w(path, specs, {{"format", "pt"}}, opts);
      EXPECT_THROW((void)w.sha256(), Error);  // not finished yet
      if (mode % 3 == 0) {
        for (const auto& s : w.layout().order)
          for (const auto& t : ts)
            if (t.name == s.name) w.write(t.name, t.bytes);
      } else if (mode % 3 == 1) {
        for (int i = 47; i >= 0; --i) w.write(ts[i].name, ts[i].bytes);
      } else {
        std::thread a([&] { for (int i = 47; i >= 0; i -= 2) w.write(ts[i].name, ts[i].bytes); });
        std::thread b([&] { for (int i = 0; i < 48; i += 2) w.write(ts[i].name, ts[i].bytes); });
        a.join();
        b.join();
      }
      w.finish();
      digest = w.sha256();
    }
    EXPECT_EQ(digest, sha256_file(path)) << "mode " << mode;
    EXPECT_EQ(read_bytes(path), ref) << "mode " << mode;
    EXPECT_EQ(temporaries_of(path), 0);
  }
  // Without options.hash there is no digest.
  StreamingFileWriter plain(dir.path() / "plain", {{"a", DType::F32, {2}}}, {});
  plain.write("a", patterned("a", DType::F32, {2}, 0).bytes);
  plain.finish();
  EXPECT_THROW((void)plain.sha256(), Error);
}

TEST(Safetensors, StreamingWriterHoldsOutOfOrderTensorsForTheHash) {
  // options.hold: tensors written ahead of the hashed prefix with an owner are kept (not
  // copied) and hashed from memory; what does not fit the budget is read back. The digest and
  // the bytes are the same either way, every held owner is let go, the budget returns to 0.
  TempDir dir;
  // one 4 MiB tensor (direct I/O)
  PatternedSet set = patterned_set(40, [](int i) { return i == 5 ? Shape{2048, 1024} : Shape{33, 7 + i % 4}; });
  auto& ts = set.owned;
  const auto& plain = set.plain;
  const auto& specs = set.specs;
  const uint64_t total = set.total;
  write_safetensors(dir.path() / "ref", plain, {});
  const auto ref = read_bytes(dir.path() / "ref");
  for (const uint64_t limit : {uint64_t{0}, uint64_t{20000}, total}) {
    HoldBudget hold(limit);
    WriterStats stats;
    const StreamingWriterOptions opts{.fsync_on_finish = false, .hash = true, .direct_io = true, .stats = &stats, .hold = &hold};
    const auto path = dir.path() / join("hold", std::to_string(limit));
    std::vector<std::weak_ptr<OwnedTensor>> seen;
    std::string digest;
    {
      StreamingFileWriter w(path, specs, {}, opts);
      std::vector<size_t> order(ts.size());
      for (size_t k = 0; k < order.size(); ++k) order[k] = order.size() - 1 - k;  // the layout's order reversed
      std::vector<std::thread> threads;
      for (int t = 0; t < 3; ++t)
        threads.emplace_back([&, t] {
          for (size_t k = t; k < order.size(); k += 3) {
            const auto& layout_name = w.layout().order[order[k]].name;
            for (const auto& x : ts)
              if (x->name == layout_name) w.write(x->name, x->bytes, x);
          }
        });
      for (auto& t : threads) t.join();
      w.finish();
      digest = w.sha256();
    }
    EXPECT_EQ(digest, sha256_file(path)) << "limit " << limit;
    EXPECT_EQ(read_bytes(path), ref) << "limit " << limit;
    for (const auto& x : ts) EXPECT_EQ(x.use_count(), 1) << x->name << " still held, limit " << limit;
    EXPECT_TRUE(hold.try_take(limit)) << "budget not returned, limit " << limit;
    EXPECT_LE(hold.peak(), limit);
    EXPECT_EQ(stats.hash.bytes.load(), total);
    EXPECT_EQ(stats.write.bytes.load(), total);
    if (limit == 0) {
      EXPECT_GT(stats.read_back.bytes.load(), 0u);
    }
    if (limit == total) {
      EXPECT_EQ(stats.read_back.bytes.load(), 0u);
    }
    if (limit == 20000) {
      EXPECT_GT(hold.peak(), 0u);
    }
  }
  {
    // An unfinished writer hands its held bytes back.
    HoldBudget hold(total);
    const StreamingWriterOptions opts{.fsync_on_finish = false, .hash = true, .hold = &hold};
    {
      StreamingFileWriter w(dir.path() / "abandoned", specs, {}, opts);
      for (size_t k = 1; k < ts.size(); ++k) {
        const auto& name = w.layout().order[k].name;
        for (const auto& x : ts)
          if (x->name == name) w.write(x->name, x->bytes, x);
      }
      EXPECT_GT(hold.peak(), 0u);
    }
    EXPECT_TRUE(hold.try_take(total));
    for (const auto& x : ts) EXPECT_EQ(x.use_count(), 1);
  }
}

TEST(Safetensors, StreamingWriterTakesTensorsInParts) {
  // write_part: tensors built in pieces (mla-convert's row-chunk units), the pieces of one
  // tensor in any order and from several threads, mixed with whole tensors; the bytes and the
  // streaming digest equal a whole-tensor write, and with a hold budget as large as the file
  // nothing is read back. Overlapping or out-of-range pieces and incomplete tensors are refused.
  TempDir dir;
  // one 8 MiB tensor (direct I/O)
  PatternedSet set = patterned_set(12, [](int i) { return i == 4 ? Shape{2048, 1024} : Shape{40 + i, 9}; });
  auto& ts = set.owned;
  const auto& plain = set.plain;
  const auto& specs = set.specs;
  const uint64_t total = set.total;
  write_safetensors(dir.path() / "ref", plain, {});
  const auto ref = read_bytes(dir.path() / "ref");
  for (const uint64_t limit : {uint64_t{0}, total}) {
    HoldBudget hold(limit);
    WriterStats stats;
    const StreamingWriterOptions opts{.fsync_on_finish = false, .hash = true, .direct_io = true, .stats = &stats, .hold = &hold};
    const auto path = dir.path() / join("parts", std::to_string(limit));
    std::string digest;
    {
      StreamingFileWriter w(path, specs, {}, opts);
      // Even tensors whole, odd ones (and the big one) in pieces of 1000 bytes + odd tails.
      struct Job {
        size_t t;
        uint64_t at, n;
      };
      std::vector<Job> jobs;
      for (size_t t = 0; t < ts.size(); ++t) {
        const uint64_t n = ts[t]->bytes.size();
        if (t % 2 == 0 && t != 4) {
          jobs.push_back({t, 0, n});
          continue;
        }
        const uint64_t step = t == 4 ? (1u << 20) + 4 : 1000;
        for (uint64_t at = 0; at < n; at += step) jobs.push_back({t, at, std::min(step, n - at)});
      }
      std::reverse(jobs.begin(), jobs.end());
      std::vector<std::thread> threads;
      for (int k = 0; k < 3; ++k)
        threads.emplace_back([&, k] {
          for (size_t j = k; j < jobs.size(); j += 3) {
            const Job& job = jobs[j];
            const auto& x = ts[job.t];
            const std::span<const std::byte> all(x->bytes.data(), x->bytes.size());
            if (job.t % 2 == 0 && job.t != 4)
              w.write(x->name, all, x);
            else
              w.write_part(x->name, job.at, all.subspan(job.at, job.n), x);
          }
        });
      for (auto& t : threads) t.join();
      w.finish();
      digest = w.sha256();
    }
    EXPECT_EQ(digest, sha256_file(path)) << "limit " << limit;
    EXPECT_EQ(read_bytes(path), ref) << "limit " << limit;
    EXPECT_EQ(stats.hash.bytes.load(), total);
    if (limit == total) {
      EXPECT_EQ(stats.read_back.bytes.load(), 0u);
    }
    for (const auto& x : ts) EXPECT_EQ(x.use_count(), 1) << x->name;
    EXPECT_TRUE(hold.try_take(limit));
  }
  {
    StreamingFileWriter w(dir.path() / "bad", specs, {});
    const auto& x = *ts[1];
    const std::span<const std::byte> all(x.bytes.data(), x.bytes.size());
    w.write_part(x.name, 8, all.subspan(8, 16));
    EXPECT_THROW(w.write_part(x.name, 20, all.subspan(20, 8)), SafetensorsError);  // overlaps [8, 24)
    EXPECT_THROW(w.write(x.name, all), SafetensorsError);                          // whole after a part
    EXPECT_THROW(w.write_part(x.name, all.size() - 4, all.subspan(0, 8)), SafetensorsError);  // past the end
    EXPECT_THROW(w.write_part(x.name, 0, all.subspan(0, 0)), SafetensorsError);               // empty
    EXPECT_THROW(w.write_part("nope", 0, all.subspan(0, 4)), SafetensorsError);
    for (size_t t = 0; t < ts.size(); ++t)
      if (t != 1) w.write(ts[t]->name, ts[t]->bytes);
    w.write_part(x.name, 0, all.subspan(0, 8));
    EXPECT_THROW(w.finish(), SafetensorsError);  // [24, end) of t1 never written
  }
}

TEST(Safetensors, StreamingWriterRejectsMisuse) {
  TempDir dir;
  const auto path = dir.path() / "m.safetensors";
  auto a = patterned("a", DType::F32, {2}, 0);
  auto b = patterned("b", DType::F32, {2}, 1);
  auto expect_kind = [](Kind k, auto&& fn) {
    try {
      fn();
      ADD_FAILURE() << "expected " << SafetensorsError::kind_name(k);
    } catch (const SafetensorsError& e) {
      EXPECT_EQ(e.kind(), k) << e.what();
    }
  };
  {
    StreamingFileWriter w(path, {{"a", DType::F32, {2}}, {"b", DType::F32, {2}}}, {});
    expect_kind(Kind::SizeMismatch, [&] { w.write("a", std::span(b.bytes).first(4)); });
    expect_kind(Kind::MissingTensor, [&] { w.write("c", a.bytes); });
    w.write("a", a.bytes);
    expect_kind(Kind::DuplicateName, [&] { w.write("a", a.bytes); });
    expect_kind(Kind::MissingTensor, [&] { w.finish(); });  // 'b' never written
    EXPECT_EQ(temporaries_of(dir.path() / "m.safetensors"), 1);
  }
  // Abandoned: neither the final nor the temporary file remains.
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(temporaries_of(path), 0);

  expect_kind(Kind::DuplicateName, [&] { plan_file({{"a", DType::U8, {1}}, {"a", DType::U8, {1}}}, {}); });
  expect_kind(Kind::BadShape, [&] { plan_file({{"a", DType::U8, {-2}}}, {}); });
  expect_kind(Kind::SizeMismatch, [&] { plan_file({{"a", DType::F4, {3}}}, {}); });
  expect_kind(Kind::Overflow, [&] { plan_file({{"a", DType::F64, {int64_t{1} << 62}}}, {}); });
  expect_kind(Kind::BadMetadata, [&] { plan_file({{"__metadata__", DType::U8, {1}}}, {}); });
  expect_kind(Kind::InvalidUtf8, [&] { plan_file({{"bad\xff", DType::U8, {1}}}, {}); });
  expect_kind(Kind::InvalidUtf8, [&] { plan_file({}, {{"k", "\xc0\xaf"}}); });
}

TEST(Safetensors, ErrorMessageNamesFileTensorFieldAndValue) {
  TempDir dir;
  const std::string json = R"({"model.a":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,10]}})";
  write_bytes(dir.path() / "model.safetensors", le64(json.size()) + json + std::string(10, '\0'));
  try {
    SafetensorsFile::open(dir.path() / "model.safetensors");
    FAIL() << "must reject";
  } catch (const SafetensorsError& e) {
    EXPECT_EQ(e.kind(), Kind::SizeMismatch);
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.safetensors: tensor 'model.a': data_offsets [0, 10] give 10 bytes but BF16 [3, 2] needs 12"),
              std::string::npos)
        << msg;
  }
}

// Table-driven over the shipped corpus: each file must fail with its manifest's Kind and
// name the file; the OK rows must open.
TEST(Safetensors, MalformedCorpusRejectedWithExpectedKind) {
  const fs::path dir = fs::path(MLA_SOURCE_DIR) / "datasets" / "malformed";
  std::ifstream manifest(dir / "manifest.tsv");
  ASSERT_TRUE(manifest) << "missing " << (dir / "manifest.tsv");
  std::string line;
  int bad_files = 0, good_files = 0;
  while (std::getline(manifest, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    std::string name, kind;
    std::getline(row, name, '\t');
    std::getline(row, kind, '\t');
    SCOPED_TRACE(name);
    if (kind == "OK") {
      EXPECT_NO_THROW(SafetensorsFile::open(dir / name));
      ++good_files;
      continue;
    }
    const Kind want = kind_from_name(kind);
    try {
      SafetensorsFile::open(dir / name);
      ADD_FAILURE() << name << " was accepted; expected " << kind;
    } catch (const SafetensorsError& e) {
      EXPECT_EQ(SafetensorsError::kind_name(e.kind()), kind) << e.what();
      EXPECT_EQ(e.kind(), want);
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    ++bad_files;
  }
  EXPECT_GE(bad_files, 20);
  EXPECT_GE(good_files, 1);
}

TEST(Safetensors, ShardsSplitAtLimitWithIndex) {
  TempDir dir;
  std::vector<OwnedTensor> ts;
  for (int i = 0; i < 10; ++i) ts.push_back(patterned(join("w", std::to_string(i)), DType::F32, {i + 1, 5}, i));
  ts.push_back(patterned("huge", DType::U8, {500}, 3));  // larger than the limit: own shard
  const uint64_t limit = 200;
  const fs::path out = dir.path() / "ckpt";
  {
    AtomicDirectory ad(out);
    write_safetensors_sharded(ad.tmp_path(), ts, {{"m", "1"}}, limit);
    EXPECT_FALSE(fs::exists(out));
    ad.commit();
  }
  std::ifstream f(out / "model.safetensors.index.json");
  ASSERT_TRUE(f);
  const auto index = nlohmann::json::parse(f);
  uint64_t total = 0;
  for (const auto& t : ts) total += t.bytes.size();
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);
  std::set<std::string> files;
  ASSERT_EQ(index["weight_map"].size(), ts.size());
  for (const auto& t : ts) {
    const std::string file = index["weight_map"].at(t.name).get<std::string>();
    files.insert(file);
    auto sf = SafetensorsFile::open(out / file);
    const auto v = sf.view(t.name);
    ASSERT_EQ(v.bytes.size(), t.bytes.size());
    EXPECT_EQ(0, std::memcmp(v.bytes.data(), t.bytes.data(), t.bytes.size()));
    EXPECT_EQ(sf.header().metadata.at("m"), "1");
  }
  EXPECT_GT(files.size(), 2u);
  for (const auto& file : files) {
    EXPECT_NE(file.find("-of-" + std::string(5 - std::to_string(files.size()).size(), '0') +
                        std::to_string(files.size())), std::string::npos) << file;
    auto sf = SafetensorsFile::open(out / file);
    if (sf.header().tensors.size() > 1) {
      EXPECT_LE(sf.header().data_size, limit) << file;
    }
  }
  // Same input, same bytes (index included).
  const fs::path again = dir.path() / "again";
  fs::create_directories(again);
  write_safetensors_sharded(again, ts, {{"m", "1"}}, limit);
  for (const auto& file : files) EXPECT_EQ(read_bytes(out / file), read_bytes(again / file)) << file;
  EXPECT_EQ(read_bytes(out / "model.safetensors.index.json"), read_bytes(again / "model.safetensors.index.json"));
}

TEST(Safetensors, OneShardIsAPlainModelFileWithoutIndex) {
  TempDir dir;
  std::vector<OwnedTensor> ts = {patterned("a", DType::BF16, {4}, 0), patterned("b", DType::BF16, {4}, 1)};
  const ShardPlan plan = write_safetensors_sharded(dir.path(), ts, {}, 1 << 20);
  ASSERT_EQ(plan.file_names, std::vector<std::string>{"model.safetensors"});
  EXPECT_TRUE(fs::exists(dir.path() / "model.safetensors"));
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors.index.json"));
  EXPECT_EQ(SafetensorsFile::open(dir.path() / "model.safetensors").header().tensors.size(), 2u);
}
