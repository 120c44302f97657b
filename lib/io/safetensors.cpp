#include "io/safetensors.hpp"

#include "io/atomic_output.hpp"
#include "io/sha256.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace mla::io {

using Kind = SafetensorsError::Kind;
using nlohmann::json;

std::string_view SafetensorsError::kind_name(Kind k) {
  switch (k) {
    case Kind::Io: return "Io";
    case Kind::TooSmall: return "TooSmall";
    case Kind::HeaderTooLarge: return "HeaderTooLarge";
    case Kind::HeaderPastEof: return "HeaderPastEof";
    case Kind::InvalidUtf8: return "InvalidUtf8";
    case Kind::InvalidJson: return "InvalidJson";
    case Kind::NotAnObject: return "NotAnObject";
    case Kind::DuplicateName: return "DuplicateName";
    case Kind::MissingField: return "MissingField";
    case Kind::BadDtype: return "BadDtype";
    case Kind::BadShape: return "BadShape";
    case Kind::BadOffsets: return "BadOffsets";
    case Kind::SizeMismatch: return "SizeMismatch";
    case Kind::Overflow: return "Overflow";
    case Kind::NotContiguous: return "NotContiguous";
    case Kind::BufferSizeMismatch: return "BufferSizeMismatch";
    case Kind::BadMetadata: return "BadMetadata";
    case Kind::MissingTensor: return "MissingTensor";
  }
  return "Unknown";
}

namespace {

// The reference implementation's limit on the JSON header (safetensors MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(Kind kind, const std::string& message) { throw SafetensorsError(kind, message); }

std::string in_quotes(std::string_view s) {
  std::string out(1, '\'');  // appended, not "'" + s: GCC 12 warns falsely on that form
  out += s;
  out += '\'';
  return out;
}

// A JSON value as short text for error messages (long values are cut).
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

uint64_t load_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// Strict UTF-8 (RFC 3629): no overlong forms, no surrogates, nothing above U+10FFFF.
// Returns the offset of the first bad byte, or npos.
size_t find_invalid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) { ++i; continue; }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) { len = 3; lo = 0xA0; }
    else if (c >= 0xE1 && c <= 0xEC) len = 3;
    else if (c == 0xED) { len = 3; hi = 0x9F; }  // excludes surrogates
    else if (c >= 0xEE && c <= 0xEF) len = 3;
    else if (c == 0xF0) { len = 4; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else if (c == 0xF4) { len = 4; hi = 0x8F; }  // <= U+10FFFF
    else return i;
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

// First pass over the header (SAX, no tree): syntax errors and duplicate keys. nlohmann's
// DOM keeps the last of duplicate keys silently, and its parser-callback form rescans the
// parent object at every object end (quadratic: 0.45 s for 8,000 tensors), so duplicates
// are caught here and the tree is built by a plain parse afterwards.
class DuplicateKeyCheck : public json::json_sax_t {
 public:
  std::string error;      // set when the text is not valid JSON
  std::string duplicate;  // set when a key repeats within one object
  size_t duplicate_depth = 0;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (open_.back().insert(k).second) return true;
    duplicate = k;
    duplicate_depth = open_.size();
    return false;  // stops the parse
  }
  bool end_object() override {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  // Also receives out_of_range for numbers beyond double (e.g. 1e400), which the DOM parse
  // throws as json::out_of_range, not parse_error: found by the fuzzer (docs/fuzzing.md).
  bool parse_error(std::size_t, const std::string&, const json::exception& e) override {
    error = e.what();
    return false;
  }

 private:
  std::vector<std::unordered_set<std::string>> open_;  // keys seen in each open object
};

json parse_rejecting_duplicates(std::string_view text, const std::string& label) {
  DuplicateKeyCheck check;
  const bool ok = json::sax_parse(text.begin(), text.end(), &check);
  if (!check.duplicate.empty()) {
    if (check.duplicate_depth == 1)
      fail(Kind::DuplicateName, label + ": header: tensor name " + in_quotes(check.duplicate) + " appears more than once");
    fail(Kind::DuplicateName, label + ": header: key " + in_quotes(check.duplicate) +
                                  " appears more than once in one object (nesting depth " +
                                  std::to_string(check.duplicate_depth) + ")");
  }
  if (!ok || !check.error.empty())
    fail(Kind::InvalidJson, label + ": header is not valid JSON: " + (check.error.empty() ? "parse stopped" : check.error));
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {  // not expected after the first pass; kept typed anyway
    fail(Kind::InvalidJson, label + ": header is not valid JSON: " + e.what());
  }
}

// a * b, or nullopt on uint64 overflow.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

TensorInfo parse_tensor_entry(const std::string& name, const json& entry, const std::string& label) {
  const std::string where = label + ": tensor " + in_quotes(name);
  if (!entry.is_object())
    fail(Kind::MissingField, where + ": entry is " + brief(entry) +
                                 ", expected an object with dtype, shape and data_offsets");
  TensorInfo info;
  info.name = name;

  auto dt = entry.find("dtype");
  if (dt == entry.end()) fail(Kind::MissingField, where + ": field 'dtype' is missing");
  if (!dt->is_string()) fail(Kind::BadDtype, where + ": dtype " + brief(*dt) + " is not a string");
  auto parsed = parse_dtype(dt->get_ref<const std::string&>());
  if (!parsed) fail(Kind::BadDtype, where + ": unknown dtype " + brief(*dt));
  info.dtype = *parsed;

  auto sh = entry.find("shape");
  if (sh == entry.end()) fail(Kind::MissingField, where + ": field 'shape' is missing");
  if (!sh->is_array()) fail(Kind::BadShape, where + ": shape " + brief(*sh) + " is not an array");
  for (size_t i = 0; i < sh->size(); ++i) {
    const json& d = (*sh)[i];
    if (d.is_number_unsigned()) {
      const auto v = d.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(Kind::Overflow, where + ": shape " + brief(*sh) + ": dimension " + std::to_string(i) + " = " +
                                 std::to_string(v) + " does not fit in int64");
      info.shape.push_back(static_cast<int64_t>(v));
    } else if (d.is_number_float() && d.get<double>() >= 1.8446744073709552e19) {
      // nlohmann reads integers too large for uint64 as floating point.
      fail(Kind::Overflow, where + ": shape " + brief(*sh) + ": dimension " + std::to_string(i) + " = " +
                               brief(d) + " does not fit in 64 bits");
    } else {
      fail(Kind::BadShape, where + ": shape " + brief(*sh) + ": dimension " + std::to_string(i) + " = " +
                               brief(d) + " is not a non-negative integer");
    }
  }

  auto off = entry.find("data_offsets");
  if (off == entry.end()) fail(Kind::MissingField, where + ": field 'data_offsets' is missing");
  if (!off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
    fail(Kind::BadOffsets, where + ": data_offsets " + brief(*off) + " is not a pair of non-negative integers");
  info.begin = (*off)[0].get<uint64_t>();
  info.end = (*off)[1].get<uint64_t>();
  if (info.begin > info.end)
    fail(Kind::BadOffsets, where + ": data_offsets " + brief(*off) + " end before they begin");

  // numel x bits / 8 must equal the span, all in overflow-checked uint64 (as the reference).
  uint64_t numel = 1;
  for (int64_t d : info.shape) {
    auto m = checked_mul(numel, static_cast<uint64_t>(d));
    if (!m) fail(Kind::Overflow, where + ": shape " + shape_to_string(info.shape) + " has more than 2^64 elements");
    numel = *m;
  }
  auto bits = checked_mul(numel, static_cast<uint64_t>(dtype_bits(info.dtype)));
  if (!bits)
    fail(Kind::Overflow, where + ": " + std::string(dtype_name(info.dtype)) + " " + shape_to_string(info.shape) +
                             " has more than 2^64 bits");
  if (*bits % 8 != 0)
    fail(Kind::SizeMismatch, where + ": " + std::string(dtype_name(info.dtype)) + " " + shape_to_string(info.shape) +
                                 " is " + std::to_string(*bits) + " bits, not a whole number of bytes");
  const uint64_t need = *bits / 8;
  if (info.end - info.begin != need)
    fail(Kind::SizeMismatch, where + ": data_offsets [" + std::to_string(info.begin) + ", " +
                                 std::to_string(info.end) + "] give " + std::to_string(info.end - info.begin) +
                                 " bytes but " + std::string(dtype_name(info.dtype)) + " " +
                                 shape_to_string(info.shape) + " needs " + std::to_string(need));
  return info;
}

std::map<std::string, std::string> parse_metadata(const json& meta, const std::string& label) {
  const std::string where = label + ": __metadata__";
  if (!meta.is_object()) fail(Kind::BadMetadata, where + " is " + brief(meta) + ", expected an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : meta.items()) {
    if (!v.is_string())
      fail(Kind::BadMetadata, where + ": value of " + in_quotes(k) + " is " + brief(v) + ", expected a string");
    out.emplace(k, v.get<std::string>());
  }
  return out;
}

}  // namespace

Header parse_and_validate(std::span<const std::byte> file_bytes, const std::string& label) {
  const uint64_t size = file_bytes.size();
  if (size < 8)
    fail(Kind::TooSmall, label + ": file is " + std::to_string(size) +
                             " bytes, shorter than the 8-byte header length prefix");
  const uint64_t n = load_le64(file_bytes.data());
  if (n > kMaxHeaderBytes)
    fail(Kind::HeaderTooLarge, label + ": header length " + std::to_string(n) + " exceeds the limit of " +
                                   std::to_string(kMaxHeaderBytes) + " bytes");
  if (n > size - 8)
    fail(Kind::HeaderPastEof, label + ": header length " + std::to_string(n) + " runs past the end of the file (" +
                                  std::to_string(size) + " bytes, so at most " + std::to_string(size - 8) + ")");

  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data()) + 8, n);
  if (auto bad = find_invalid_utf8(text); bad != std::string_view::npos)
    fail(Kind::InvalidUtf8, label + ": header is not valid UTF-8 at header byte " + std::to_string(bad) +
                                " (0x" + [&] {
                                  char b[3];
                                  std::snprintf(b, sizeof b, "%02X", static_cast<unsigned char>(text[bad]));
                                  return std::string(b);
                                }() + ")");
  // Whitespace before the object is accepted, as the reference (0.8) does: JSON allows it.
  const json root = parse_rejecting_duplicates(text, label);
  if (!root.is_object()) fail(Kind::NotAnObject, label + ": header is " + brief(root) + ", not a JSON object");

  Header h;
  h.header_size = n;
  h.data_size = size - 8 - n;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") h.metadata = parse_metadata(value, label);
    else h.tensors.push_back(parse_tensor_entry(key, value, label));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin != expected) {
      const std::string what = t.begin > expected ? "a hole" : "an overlap";
      fail(Kind::NotContiguous,
           label + ": tensor " + in_quotes(t.name) + ": data_offsets [" + std::to_string(t.begin) + ", " +
               std::to_string(t.end) + "] begin at " + std::to_string(t.begin) + " but " +
               (prev ? "the previous tensor " + in_quotes(prev->name) + " ends at " : std::string("data starts at ")) +
               std::to_string(expected) + " (" + what + ")");
    }
    expected = t.end;
    prev = &t;
  }
  if (expected != h.data_size)
    fail(Kind::BufferSizeMismatch, label + ": tensors cover " + std::to_string(expected) +
                                       " bytes but the data buffer holds " + std::to_string(h.data_size));
  return h;
}

// ---------------------------------------------------------------- reader

struct SafetensorsFile::Impl {
  std::filesystem::path path;
  void* addr = nullptr;
  size_t length = 0;
  Header header;
  std::unordered_map<std::string, size_t> index;  // name -> header.tensors position
  const std::byte* data() const { return static_cast<const std::byte*>(addr) + 8 + header.header_size; }
  ~Impl() {
    if (addr) munmap(addr, length);
  }
};

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  const std::string label = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(Kind::Io, label + ": cannot open: " + std::strerror(errno));
  struct stat st{};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(Kind::Io, label + ": cannot stat: " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(Kind::Io, label + ": not a regular file");
  }
  impl->length = static_cast<size_t>(st.st_size);
  if (impl->length > 0) {
    // Read-only private mapping: views are zero-copy and pages load on first touch.
    void* a = mmap(nullptr, impl->length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (a == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail(Kind::Io, label + ": cannot mmap " + std::to_string(impl->length) + " bytes: " + std::strerror(err));
    }
    impl->addr = a;
  }
  ::close(fd);  // the mapping keeps the file alive
  impl->header = parse_and_validate({static_cast<const std::byte*>(impl->addr), impl->length}, label);
  for (size_t i = 0; i < impl->header.tensors.size(); ++i) impl->index.emplace(impl->header.tensors[i].name, i);
  return SafetensorsFile(std::move(impl));
}

const std::filesystem::path& SafetensorsFile::path() const { return impl_->path; }
const Header& SafetensorsFile::header() const { return impl_->header; }

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = impl_->index.find(std::string(name));
  return it == impl_->index.end() ? nullptr : &impl_->header.tensors[it->second];
}

TensorView SafetensorsFile::view(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) fail(Kind::MissingTensor, impl_->path.string() + ": no tensor named " + in_quotes(name));
  return TensorView{t->dtype, t->shape, {impl_->data() + t->begin, static_cast<size_t>(t->end - t->begin)}};
}

// ---------------------------------------------------------------- writer

uint64_t TensorSpec::nbytes() const {
  const std::string where = "tensor " + in_quotes(name);
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(Kind::BadShape, where + ": shape " + shape_to_string(shape) + " has a negative dimension");
    auto m = checked_mul(numel, static_cast<uint64_t>(d));
    if (!m) fail(Kind::Overflow, where + ": shape " + shape_to_string(shape) + " has more than 2^64 elements");
    numel = *m;
  }
  auto bits = checked_mul(numel, static_cast<uint64_t>(dtype_bits(dtype)));
  if (!bits) fail(Kind::Overflow, where + ": shape " + shape_to_string(shape) + " has more than 2^64 bits");
  if (*bits % 8 != 0)
    fail(Kind::SizeMismatch, where + ": " + std::string(dtype_name(dtype)) + " " + shape_to_string(shape) +
                                 " is not a whole number of bytes");
  return *bits / 8;
}

namespace {

// Write order of dtypes: the reference serializer's (safetensors `Dtype` declaration order,
// written descending). It ascends with element size, so writing the highest rank first keeps
// every tensor naturally aligned (the data buffer starts at a multiple of 8), and ties of
// equal size are broken as the reference does: our data buffer is byte-identical to the
// Python package's for the same tensors (tests/python_interop checks it).
int reference_rank(DType t) {
  switch (t) {
    case DType::BOOL: return 0;
    case DType::F4: return 1;
    case DType::U8: return 2;
    case DType::I8: return 3;
    case DType::F8_E5M2: return 4;
    case DType::F8_E4M3: return 5;
    case DType::F8_E8M0: return 6;
    case DType::I16: return 7;
    case DType::U16: return 8;
    case DType::F16: return 9;
    case DType::BF16: return 10;
    case DType::I32: return 11;
    case DType::U32: return 12;
    case DType::F32: return 13;
    case DType::F64: return 14;
    case DType::I64: return 15;
    case DType::U64: return 16;
  }
  return -1;
}

void check_names(const std::vector<TensorSpec>& specs) {
  std::set<std::string_view> seen;
  for (const auto& s : specs) {
    if (s.name.empty()) fail(Kind::MissingField, "writer: a tensor has an empty name");
    if (s.name == "__metadata__") fail(Kind::BadMetadata, "writer: '__metadata__' cannot name a tensor");
    if (!seen.insert(s.name).second) fail(Kind::DuplicateName, "writer: tensor " + in_quotes(s.name) + " given twice");
  }
}

void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& label) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(Kind::Io, label + ": write failed at offset " + std::to_string(offset) + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

}  // namespace

FileLayout plan_file(std::vector<TensorSpec> specs, const std::map<std::string, std::string>& metadata) {
  check_names(specs);
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    const int ra = reference_rank(a.dtype), rb = reference_rank(b.dtype);
    if (ra != rb) return ra > rb;
    return a.name < b.name;
  });
  FileLayout layout;
  json header = json::object();  // std::map-backed: keys come out sorted
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& s : specs) {
    const uint64_t n = s.nbytes();
    layout.offsets.push_back(offset);
    header[s.name] = {{"dtype", dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  layout.data_size = offset;
  layout.order = std::move(specs);
  try {
    layout.header_json = header.dump();
  } catch (const json::type_error& e) {
    fail(Kind::InvalidUtf8, std::string("writer: a tensor name or metadata entry is not valid UTF-8: ") + e.what());
  }
  layout.header_json.append((8 - layout.header_json.size() % 8) % 8, ' ');
  return layout;
}

namespace {

// Direct I/O (StreamingWriterOptions::direct_io): 4096-byte aligned blocks, staged through a
// per-thread aligned buffer; only tensors of at least kDirectMin bytes go this way.
constexpr uint64_t kDirectAlign = 4096;
constexpr uint64_t kDirectMin = 1u << 20;
constexpr size_t kDirectChunk = 8u << 20;

std::byte* direct_staging() {
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<std::byte, Free> buf(static_cast<std::byte*>(std::aligned_alloc(kDirectAlign, kDirectChunk)));
  if (!buf) throw std::bad_alloc();
  return buf.get();
}

}  // namespace

struct StreamingFileWriter::Impl {
  std::filesystem::path path;
  std::unique_ptr<AtomicFile> out;  // the temporary beside `path`, renamed by finish()
  std::filesystem::path tmp;        // out->tmp_path()
  int fd = -1;
  FileLayout layout;
  std::unordered_map<std::string, size_t> index;
  StreamingWriterOptions options;
  int dfd = -1;                        // the same file opened O_DIRECT (options.direct_io)
  std::atomic<bool> direct_ok{false};  // cleared when the filesystem refuses direct I/O
  std::mutex mutex;  // guards `claimed`, `whole`, `landed`, `hash_pos`, `hashing`, `hash_failed`
  // Byte ranges [begin, end) of each tensor claimed by a write() or write_part() (overlap =
  // written twice; finish() checks they cover the tensor); `whole`: claimed by write().
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> claimed;
  std::vector<bool> whole;
  bool finished = false;
  // Streaming hash (options.hash): the header and data bytes [0, hash_pos) are hashed; at most
  // one thread (`hashing`) extends the prefix at a time.
  std::unique_ptr<Sha256> hasher;
  uint64_t hash_pos = 0;
  bool hashing = false;
  bool hash_failed = false;
  std::string digest;
  // Pieces whose bytes are in the file but not yet hashed, by data offset. Held ones
  // (options.hold) keep their owner alive and are hashed from memory; the rest are read back.
  // `own`: the draining caller's own bytes (alive for the duration of its drain()).
  struct Piece {
    uint64_t n = 0;
    std::shared_ptr<const void> owner;
    std::span<const std::byte> bytes;
    bool own = false;
  };
  std::map<uint64_t, Piece> landed;

  uint64_t data_start() const { return 8 + layout.header_json.size(); }
  // Hashes landed pieces from hash_pos on while they are contiguous.
  void drain();
  // Writes bytes at `offset`: the 4096-aligned interior of a large tensor with direct I/O
  // (no page-cache copy), its unaligned head and tail (blocks shared with neighbours) and
  // everything else through the page cache.
  void put(const std::byte* data, uint64_t n, uint64_t offset);
  bool put_direct(const std::byte* src, uint64_t n, uint64_t offset);
  // Hashes file bytes [off, off + n) read back (direct reads for large tensors).
  void hash_back(uint64_t off, uint64_t n, std::vector<std::byte>& buf);
  ssize_t timed_pread(int file, std::byte* dst, size_t n, uint64_t off) {
    ScopedPhase timed(options.stats ? &options.stats->read_back : nullptr, n);
    return ::pread(file, dst, n, static_cast<off_t>(off));
  }
  void hash_update(const std::byte* p, uint64_t n) {
    ScopedPhase timed(options.stats ? &options.stats->hash : nullptr, n);
    hasher->update(p, n);
  }
  void write_range(size_t k, uint64_t at, std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                   bool whole_tensor);
};

void StreamingFileWriter::Impl::put(const std::byte* data, uint64_t n, uint64_t offset) {
  ScopedPhase timed(options.stats ? &options.stats->write : nullptr, n);
  if (n >= kDirectMin && direct_ok.load(std::memory_order_relaxed)) {
    const uint64_t a = (offset + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    const uint64_t b = (offset + n) / kDirectAlign * kDirectAlign;
    if (b > a && put_direct(data + (a - offset), b - a, a)) {
      pwrite_all(fd, data, a - offset, offset, tmp.string());
      pwrite_all(fd, data + (b - offset), offset + n - b, b, tmp.string());
      return;
    }
  }
  pwrite_all(fd, data, n, offset, tmp.string());
}

bool StreamingFileWriter::Impl::put_direct(const std::byte* src, uint64_t n, uint64_t offset) {
  std::byte* buf = direct_staging();
  uint64_t done = 0;
  while (done < n) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(n - done, kDirectChunk));
    std::memcpy(buf, src + done, k);
    const ssize_t w = ::pwrite(dfd, buf, k, static_cast<off_t>(offset + done));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EINVAL && done == 0) {  // not supported here: page cache from now on
      direct_ok = false;
      return false;
    }
    if (w <= 0 || static_cast<uint64_t>(w) % kDirectAlign != 0)
      fail(Kind::Io, tmp.string() + ": direct write failed at offset " + std::to_string(offset + done) + ": " +
                         (w < 0 ? std::string(std::strerror(errno)) : std::string("short write")));
    done += static_cast<uint64_t>(w);
  }
  return true;
}

void StreamingFileWriter::Impl::hash_back(uint64_t off, uint64_t n, std::vector<std::byte>& buf) {
  const uint64_t end = off + n;
  if (n >= kDirectMin && direct_ok.load(std::memory_order_relaxed)) {
    // Aligned superset; the kernel writes dirty boundary pages back before a direct read.
    std::byte* st = direct_staging();
    uint64_t pos = off / kDirectAlign * kDirectAlign;
    const uint64_t stop = (end + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    while (pos < end && pos % kDirectAlign == 0) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kDirectChunk, stop - pos));
      const ssize_t got = timed_pread(dfd, st, want, pos);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0 && errno == EINVAL) break;  // finish through the page cache
      if (got <= 0)
        fail(Kind::Io, tmp.string() + ": read back for SHA-256 failed: " +
                           (got < 0 ? std::string(std::strerror(errno)) : std::string("unexpected end of file")));
      const uint64_t lo = std::max(pos, off), hi = std::min(pos + static_cast<uint64_t>(got), end);
      if (hi > lo) hash_update(st + (lo - pos), hi - lo);
      pos += static_cast<uint64_t>(got);
    }
    if (pos >= end) return;
    off = std::max(pos, off);
  }
  uint64_t left = end - off;
  if (buf.empty() && left) buf.resize(kDirectChunk);
  while (left) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    const ssize_t got = timed_pread(fd, buf.data(), k, off);
    if (got <= 0) {
      if (got < 0 && errno == EINTR) continue;
      fail(Kind::Io, tmp.string() + ": read back for SHA-256 failed: " +
                         (got < 0 ? std::string(std::strerror(errno)) : std::string("unexpected end of file")));
    }
    hash_update(buf.data(), static_cast<size_t>(got));
    off += static_cast<uint64_t>(got);
    left -= static_cast<uint64_t>(got);
  }
}

void StreamingFileWriter::Impl::drain() {
  std::vector<std::byte> buf;
  std::vector<std::pair<uint64_t, Piece>> run;
  for (;;) {
    run.clear();
    {
      std::lock_guard lock(mutex);
      uint64_t pos = hash_pos;
      for (auto it = landed.begin(); it != landed.end() && it->first == pos;) {
        pos += it->second.n;
        run.emplace_back(it->first, std::move(it->second));
        it = landed.erase(it);
      }
      if (run.empty()) {
        hashing = false;
        return;
      }
    }
    try {
      for (auto& [off, piece] : run) {
        if (piece.own || piece.owner) {
          hash_update(piece.bytes.data(), piece.n);
          if (piece.owner) {
            options.hold->give(piece.n);
            piece.owner.reset();
          }
        } else {
          hash_back(data_start() + off, piece.n, buf);
        }
        if (options.on_hashed) options.on_hashed(piece.n);
      }
    } catch (...) {
      std::lock_guard lock(mutex);
      for (auto& [off, piece] : run)  // not hashed: hand back what is still held
        if (piece.owner) options.hold->give(piece.n);
      hashing = false;  // hasher state is now unusable: finish() reports it
      hash_failed = true;
      throw;
    }
    std::lock_guard lock(mutex);
    hash_pos = run.back().first + run.back().second.n;
  }
}

StreamingFileWriter::StreamingFileWriter(const std::filesystem::path& path, std::vector<TensorSpec> specs,
                                         const std::map<std::string, std::string>& metadata,
                                         StreamingWriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& w = *impl_;
  w.options = options;
  w.path = path;
  w.out = std::make_unique<AtomicFile>(path);
  w.tmp = w.out->tmp_path();
  w.layout = plan_file(std::move(specs), metadata);
  for (size_t i = 0; i < w.layout.order.size(); ++i) w.index.emplace(w.layout.order[i].name, i);
  w.claimed.resize(w.layout.order.size());
  w.whole.assign(w.layout.order.size(), false);
  w.fd = ::open(w.tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);  // read: options.hash
  if (w.fd < 0) fail(Kind::Io, w.tmp.string() + ": cannot create: " + std::strerror(errno));
  std::byte prefix[8];
  const uint64_t n = w.layout.header_json.size();
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  pwrite_all(w.fd, prefix, 8, 0, w.tmp.string());
  pwrite_all(w.fd, w.layout.header_json.data(), n, 8, w.tmp.string());
  if (w.options.hash) {
    w.hasher = std::make_unique<Sha256>();
    w.hasher->update(prefix, 8);
    w.hasher->update(w.layout.header_json);
  }
  // Sized up front so tensors can land in any order (the file is sparse until written).
  if (ftruncate(w.fd, static_cast<off_t>(w.layout.file_size())) != 0)
    fail(Kind::Io, w.tmp.string() + ": cannot size to " + std::to_string(w.layout.file_size()) +
                       " bytes: " + std::strerror(errno));
  if (w.options.direct_io) {
    w.dfd = ::open(w.tmp.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);  // fails (EINVAL) where unsupported
    w.direct_ok = w.dfd >= 0;
  }
}

StreamingFileWriter::~StreamingFileWriter() {
  if (!impl_) return;
  for (auto& [off, p] : impl_->landed)  // a failed run: hand the held bytes back to the budget
    if (p.owner) impl_->options.hold->give(p.n);
  if (impl_->fd >= 0) ::close(impl_->fd);
  if (impl_->dfd >= 0) ::close(impl_->dfd);
  // Unfinished, impl_->out removes the temporary: never leave a half-written file.
}

const FileLayout& StreamingFileWriter::layout() const { return impl_->layout; }

bool HoldBudget::try_take(uint64_t n) {
  uint64_t cur = used_.load(std::memory_order_relaxed);
  do {
    if (cur + n > limit_) return false;
  } while (!used_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed));
  uint64_t p = peak_.load(std::memory_order_relaxed);
  while (cur + n > p && !peak_.compare_exchange_weak(p, cur + n, std::memory_order_relaxed)) {
  }
  return true;
}

void StreamingFileWriter::write(std::string_view name, std::span<const std::byte> bytes) { write(name, bytes, nullptr); }

void StreamingFileWriter::write(std::string_view name, std::span<const std::byte> bytes,
                                std::shared_ptr<const void> owner) {
  Impl& w = *impl_;
  const std::string label = w.path.string();
  auto it = w.index.find(std::string(name));
  if (it == w.index.end()) fail(Kind::MissingTensor, label + ": tensor " + in_quotes(name) + " is not in the planned file");
  const TensorSpec& spec = w.layout.order[it->second];
  const uint64_t need = spec.nbytes();
  if (bytes.size() != need)
    fail(Kind::SizeMismatch, label + ": tensor " + in_quotes(name) + ": got " + std::to_string(bytes.size()) +
                                 " bytes but " + std::string(dtype_name(spec.dtype)) + " " +
                                 shape_to_string(spec.shape) + " needs " + std::to_string(need));
  w.write_range(it->second, 0, bytes, std::move(owner), true);
}

void StreamingFileWriter::write_part(std::string_view name, uint64_t at, std::span<const std::byte> bytes,
                                     std::shared_ptr<const void> owner) {
  Impl& w = *impl_;
  const std::string label = w.path.string();
  auto it = w.index.find(std::string(name));
  if (it == w.index.end()) fail(Kind::MissingTensor, label + ": tensor " + in_quotes(name) + " is not in the planned file");
  const uint64_t need = w.layout.order[it->second].nbytes();
  if (bytes.empty() || at > need || bytes.size() > need - at)
    fail(Kind::SizeMismatch, label + ": tensor " + in_quotes(name) + ": part of " + std::to_string(bytes.size()) +
                                 " bytes at " + std::to_string(at) + " is empty or outside its " +
                                 std::to_string(need) + " bytes");
  w.write_range(it->second, at, bytes, std::move(owner), false);
}

void StreamingFileWriter::Impl::write_range(size_t k, uint64_t at, std::span<const std::byte> bytes,
                                            std::shared_ptr<const void> owner, bool whole_tensor) {
  const std::string label = path.string();
  const std::string& name = layout.order[k].name;
  const uint64_t end = at + bytes.size();
  {
    std::lock_guard lock(mutex);
    if (finished) fail(Kind::Io, label + ": write of " + in_quotes(name) + " after finish()");
    bool overlap = whole[k] || (whole_tensor && !claimed[k].empty());
    for (const auto& [b, e] : claimed[k]) overlap = overlap || (at < e && b < end);
    if (overlap) fail(Kind::DuplicateName, label + ": tensor " + in_quotes(name) + " written twice");
    if (whole_tensor) whole[k] = true;
    if (end > at) claimed[k].emplace_back(at, end);
  }
  const uint64_t off = layout.offsets[k] + at;  // in the data buffer
  put(bytes.data(), bytes.size(), data_start() + off);
  if (bytes.empty()) return;
  bool mine = false;
  {
    std::lock_guard lock(mutex);
    Piece p;
    p.n = bytes.size();
    if (hasher && !hashing && !hash_failed && hash_pos == off) {
      mine = hashing = true;
      p.bytes = bytes;
      p.own = true;
    } else if (hasher && owner && options.hold && options.hold->try_take(bytes.size())) {
      p.owner = std::move(owner);
      p.bytes = bytes;
    }
    landed.emplace(off, std::move(p));
  }
  if (mine) drain();
}

const std::string& StreamingFileWriter::sha256() const {
  if (!impl_->options.hash || !impl_->finished)
    throw Error(impl_->path.string() + ": sha256() needs a finished writer with options.hash");
  return impl_->digest;
}

void StreamingFileWriter::finish() {
  Impl& w = *impl_;
  const std::string label = w.path.string();
  std::unique_lock lock(w.mutex);
  if (w.finished) return;
  std::string missing;
  size_t n_missing = 0;
  for (size_t i = 0; i < w.claimed.size(); ++i) {
    uint64_t covered = 0;
    for (const auto& [b, e] : w.claimed[i]) covered += e - b;  // claimed ranges never overlap
    if (w.whole[i] || covered == w.layout.order[i].nbytes()) continue;
    if (n_missing++ < 5) missing += (missing.empty() ? "" : ", ") + in_quotes(w.layout.order[i].name);
  }
  if (n_missing)
    fail(Kind::MissingTensor, label + ": finish() with " + std::to_string(n_missing) + " tensor(s) never written (or only in part): " +
                                  missing + (n_missing > 5 ? ", ..." : ""));
  if (w.hasher) {
    // Every write() has returned, so no thread is hashing; hash what is still pending.
    if (w.hashing || w.hash_failed)
      fail(Kind::Io, w.tmp.string() + ": SHA-256 of the file is incomplete (an earlier read-back failed)");
    w.hashing = true;
    lock.unlock();
    w.drain();
    lock.lock();
    if (w.hash_pos != w.layout.data_size) fail(Kind::Io, w.tmp.string() + ": SHA-256 of the file is incomplete");
    w.digest = w.hasher->hex();
  }
  if (w.options.fsync_on_finish && fsync(w.fd) != 0)
    fail(Kind::Io, w.tmp.string() + ": fsync failed: " + std::strerror(errno));
  if (w.dfd >= 0) {
    ::close(w.dfd);
    w.dfd = -1;
    w.direct_ok = false;
  }
  const int fd = w.fd;
  w.fd = -1;
  if (::close(fd) != 0) fail(Kind::Io, w.tmp.string() + ": close failed: " + std::strerror(errno));
  try {
    w.out->commit();
  } catch (const Error& e) {
    fail(Kind::Io, e.what());
  }
  w.finished = true;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<OwnedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const auto& t : tensors) specs.push_back({t.name, t.dtype, t.shape});
  StreamingFileWriter writer(path, std::move(specs), metadata);
  for (const auto& t : tensors) writer.write(t.name, t.bytes);
  writer.finish();
}

// ---------------------------------------------------------------- shards

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

ShardPlan plan_shards(std::vector<TensorSpec> specs, uint64_t max_shard_bytes) {
  check_names(specs);
  // Name order keeps related tensors (a weight and its scale_inv, one layer) together.
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) { return a.name < b.name; });
  ShardPlan plan;
  uint64_t current = 0;
  for (auto& s : specs) {
    const uint64_t n = s.nbytes();
    if (plan.shards.empty() || (current > 0 && current + n > max_shard_bytes)) {
      plan.shards.emplace_back();
      current = 0;
    }
    current += n;
    plan.total_size += n;
    plan.shards.back().push_back(std::move(s));
  }
  if (plan.shards.empty()) plan.shards.emplace_back();  // an empty model is one empty file
  const size_t count = plan.shards.size();
  for (size_t i = 0; i < count; ++i) {
    plan.file_names.push_back(count == 1 ? std::string(kSingleFileName) : shard_file_name(i, count));
    for (const auto& s : plan.shards[i]) plan.weight_map.emplace(s.name, plan.file_names.back());
  }
  return plan;
}

std::string index_json(const ShardPlan& plan) {
  json j = {{"metadata", {{"total_size", plan.total_size}}}, {"weight_map", plan.weight_map}};
  return j.dump(2) + "\n";
}

ShardPlan write_safetensors_sharded(const std::filesystem::path& dir, const std::vector<OwnedTensor>& tensors,
                                    const std::map<std::string, std::string>& metadata, uint64_t max_shard_bytes) {
  std::vector<TensorSpec> specs;
  std::unordered_map<std::string, const OwnedTensor*> by_name;
  for (const auto& t : tensors) {
    specs.push_back({t.name, t.dtype, t.shape});
    by_name.emplace(t.name, &t);
  }
  ShardPlan plan = plan_shards(std::move(specs), max_shard_bytes);
  for (size_t i = 0; i < plan.shards.size(); ++i) {
    StreamingFileWriter writer(dir / plan.file_names[i], plan.shards[i], metadata);
    for (const auto& s : plan.shards[i]) writer.write(s.name, by_name.at(s.name)->bytes);
    writer.finish();
  }
  if (plan.shards.size() > 1) {
    const auto index_path = dir / kIndexFileName;
    try {
      write_file_atomically(index_path, index_json(plan), /*durable=*/true);
    } catch (const Error& e) {
      fail(Kind::Io, e.what());
    }
  }
  return plan;
}

}  // namespace mla::io
