#include "io/capture.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.hpp"

namespace mla::io {
namespace {

std::string shape_str(const h5::Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// One lock for every HDF5 call of the reader: mla-calibrate runs layers on worker threads and
// prefetch threads, and the io::h5 wrappers keep no locks of their own.
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

std::string dims_str(const h5::Dims& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

constexpr std::size_t kAlign = 4096;  // O_DIRECT: offset, length and buffer aligned to this

struct FreeDeleter {
  void operator()(unsigned char* p) const { std::free(p); }
};
using AlignedBuf = std::unique_ptr<unsigned char, FreeDeleter>;
AlignedBuf aligned_buffer(std::size_t bytes) {
  const std::size_t n = (bytes + kAlign - 1) / kAlign * kAlign;
  auto* p = static_cast<unsigned char*>(std::aligned_alloc(kAlign, n ? n : kAlign));
  if (!p) throw Error("out of memory allocating a " + std::to_string(n) + "-byte read buffer");
  return AlignedBuf(p);
}

// True when no element is NaN or Inf (exponent bits all ones): branch-free OR over the bits,
// which the compiler vectorises. `x` may be unaligned (RawRows), hence bytes and memcpy.
bool all_finite_f32(const unsigned char* x, std::size_t n) {
  uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + 4 * i, sizeof u);
    bad |= static_cast<uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}
bool all_finite_bf16(const unsigned char* x, std::size_t n) {
  uint16_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    uint16_t u;
    std::memcpy(&u, x + 2 * i, sizeof u);
    bad |= static_cast<uint16_t>((u & 0x7f80u) == 0x7f80u);
  }
  return bad == 0;
}
[[noreturn]] void bad(const std::string& file, const std::string& what) { throw InputError(file + ": " + what); }

void expect_dims(const std::string& file, const std::string& path, const h5::Dims& got, const h5::Dims& want) {
  if (got != want) bad(file, "dataset " + path + " has shape " + shape_str(got) + ", expected " + shape_str(want));
}

std::vector<float> to_float(const MatrixR& m) {
  std::vector<float> out(static_cast<size_t>(m.size()));
  for (int64_t i = 0; i < m.size(); ++i) out[static_cast<size_t>(i)] = static_cast<float>(m.data()[i]);
  return out;
}

}  // namespace

const char* stored_type_name(StoredType t) {
  switch (t) {
    case StoredType::F32: return "float32";
    case StoredType::BF16: return "bfloat16";
    default: return "float (converted by HDF5)";
  }
}

hid_t make_bf16_h5_type() {
  // From IEEE float32 LE: the fields first (they must fit the current 32-bit precision), then
  // precision and size down to 16 bits, then the exponent bias.
  const hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (t < 0 || H5Tset_fields(t, 15, 7, 8, 0, 7) < 0 || H5Tset_offset(t, 0) < 0 || H5Tset_precision(t, 16) < 0 ||
      H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 127) < 0) {
    if (t >= 0) H5Tclose(t);
    throw Error("HDF5: cannot build the bfloat16 datatype");
  }
  return t;
}

bool classify_h5_float_type(hid_t ft, StoredType& out, std::string* description) {
  const H5T_class_t cls = H5Tget_class(ft);
  const std::size_t size = H5Tget_size(ft);
  if (cls != H5T_FLOAT) {
    if (description) {
      const char* name = cls == H5T_INTEGER ? "integer" : cls == H5T_STRING ? "string" : cls == H5T_COMPOUND ? "compound" : "non-float";
      *description = std::string(name) + " of " + std::to_string(size) + " bytes";
    }
    return false;
  }
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  H5Tget_fields(ft, &spos, &epos, &esize, &mpos, &msize);
  const std::size_t ebias = H5Tget_ebias(ft);
  const bool le = H5Tget_order(ft) == H5T_ORDER_LE;
  if (size == 4 && le && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23 && ebias == 127) {
    out = StoredType::F32;
  } else if (size == 2 && le && spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 && ebias == 127) {
    out = StoredType::BF16;
  } else {
    out = StoredType::OTHER;
  }
  if (description) {
    *description = out == StoredType::OTHER
        ? "float of " + std::to_string(size) + " bytes (sign " + std::to_string(spos) + ", exponent " +
              std::to_string(esize) + " bits, mantissa " + std::to_string(msize) + " bits, " +
              (le ? "little" : "big") + "-endian)"
        : std::string(stored_type_name(out));
  }
  return true;
}

// Raw handles: one H5Fopen of the capture with each dataset opened once (opening a dataset per
// sequence costs more than reading 4096 cached rows), and the file descriptors for pread.
struct CaptureReader::Impl {
  struct Ds {
    hid_t id = H5I_INVALID_HID;
    StoredType type = StoredType::F32;  // as stored
    hid_t mem_type = H5I_INVALID_HID;    // H5Dread memory type (owned when BF16)
    bool raw_chunks = false;             // chunk = one sequence, no filters: pread its bytes
    std::string type_name;
  };
  hid_t file = H5I_INVALID_HID;
  std::map<std::string, Ds> datasets;
  bool userblock_zero = false;
  int fd_direct = -1, fd_buffered = -1;
  std::atomic<bool> direct_failed{false};
  ~Impl() {
    for (auto& kv : datasets) {
      if (kv.second.type == StoredType::BF16 && kv.second.mem_type >= 0) H5Tclose(kv.second.mem_type);
      H5Dclose(kv.second.id);
    }
    if (file >= 0) H5Fclose(file);
    if (fd_direct >= 0) ::close(fd_direct);
    if (fd_buffered >= 0) ::close(fd_buffered);
  }
};

std::string CaptureReader::layer_path(int64_t layer, const char* what) const {
  return split_ + "/" + h5::layer_group_name(layer) + "/" + what;
}

int64_t CaptureReader::width(const char* what) const {
  const std::string w(what);
  return w == "hidden" ? cfg_.hidden_size : w == "latent" ? cfg_.kv_lora_rank : cfg_.qk_rope_head_dim;
}



CaptureReader::CaptureReader(const std::filesystem::path& path, const model::MlaConfig& cfg,
                 const std::string& split)
    : file_(h5::File::open_read(path)), impl_(std::make_unique<Impl>()), split_(split), cfg_(cfg) {
  const auto& root = file_.root();
  info_.path = path.string();
  const std::string where = "capture " + info_.path;
  static_cast<CaptureMeta&>(info_) = io::read_capture_attributes(root, where);
  if (info_.num_layers != cfg.attention_layers() && info_.num_layers != cfg.num_hidden_layers) {
    throw InputError(where + ": attribute num_layers = " + std::to_string(info_.num_layers) +
                     " does not match the model's " + std::to_string(cfg.num_hidden_layers) +
                     " layers");
  }
  if (info_.hidden_size != cfg.hidden_size) {
    throw InputError(where + ": attribute hidden_size = " + std::to_string(info_.hidden_size) +
                     " does not match the model's hidden_size " + std::to_string(cfg.hidden_size));
  }
  if (!root.exists(split_)) throw InputError(where + ": group /" + split_ + " is missing");
  const auto tokens = root.open(split_ + "/tokens").dims();
  if (tokens.size() != 2) {
    throw InputError(where + ": /" + split_ + "/tokens must be 2-D [S, T], got " + dims_str(tokens));
  }
  info_.sequences = static_cast<int64_t>(tokens[0]);
  info_.seq_len = static_cast<int64_t>(tokens[1]);
  if (info_.sequences == 0 || info_.seq_len == 0) {
    throw InputError(where + ": /" + split_ + " is empty (tokens " + dims_str(tokens) + ")");
  }
  info_.has_hidden = root.exists(layer_path(0, "hidden"));
  std::error_code ec;
  info_.file_bytes = std::filesystem::file_size(path, ec);

  std::lock_guard<std::mutex> lock(h5_mutex());
  Impl& im = *impl_;
  im.file = H5Fopen(info_.path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (im.file < 0) throw InputError(where + ": cannot reopen for reading");
  {
    const hid_t fcpl = H5Fget_create_plist(im.file);
    hsize_t ub = 1;
    if (fcpl >= 0) {
      H5Pget_userblock(fcpl, &ub);
      H5Pclose(fcpl);
    }
    im.userblock_zero = ub == 0;
  }
  // Validate every layer's shapes and element types up front so a mismatch fails before hours
  // of work; open the datasets for the streaming reads.
  for (int64_t l = 0; l < info_.num_layers; ++l) {
    auto check = [&](const char* what, int64_t width) {
      const std::string p = layer_path(l, what);
      if (!root.exists(p)) throw InputError(where + ": dataset /" + p + " is missing");
      const auto d = root.open(p).dims();
      const h5::Dims want{tokens[0], tokens[1], static_cast<uint64_t>(width)};
      if (d != want) {
        throw InputError(where + ": dataset /" + p + " has shape " + dims_str(d) + ", expected " +
                         dims_str(want));
      }
      Impl::Ds ds;
      ds.id = H5Dopen2(im.file, p.c_str(), H5P_DEFAULT);
      if (ds.id < 0) throw InputError(where + ": dataset /" + p + ": cannot open");
      const hid_t ft = H5Dget_type(ds.id);
      const bool is_float = classify_h5_float_type(ft, ds.type, &ds.type_name);
      H5Tclose(ft);
      if (!is_float) {
        H5Dclose(ds.id);
        throw InputError(where + ": dataset /" + p + " has element type " + ds.type_name +
                         ", expected float32 or bfloat16");
      }
      ds.mem_type = ds.type == StoredType::BF16 ? make_bf16_h5_type() : H5T_NATIVE_FLOAT;
      const hid_t dcpl = H5Dget_create_plist(ds.id);
      if (dcpl >= 0) {
        hsize_t chunk[3] = {0, 0, 0};
        ds.raw_chunks = ds.type != StoredType::OTHER && im.userblock_zero &&
                        H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 3, chunk) == 3 &&
                        chunk[0] == 1 && chunk[1] == tokens[1] && chunk[2] == static_cast<hsize_t>(width) &&
                        H5Pget_nfilters(dcpl) == 0;
        H5Pclose(dcpl);
      }
      if (l == 0) info_.latent_type = ds.type;
      im.datasets.emplace(p, std::move(ds));
    };
    if (info_.has_hidden) {
      check("hidden", cfg.hidden_size);
    } else {
      check("latent", cfg.kv_lora_rank);
      check("k_pe", cfg.qk_rope_head_dim);
    }
  }
}

IoMode CaptureReader::effective_io_mode() const {
  if (io_mode_ != IoMode::Auto) return io_mode_;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  const double ram = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
  return ram > 0 && static_cast<double>(info_.file_bytes) > 0.5 * ram ? IoMode::Direct : IoMode::Buffered;
}

void CaptureReader::check_finite(const RawRows& r, int64_t layer, int64_t s, const char* what) const {
  const std::size_t n = static_cast<std::size_t>(r.rows * r.width);
  const auto* bytes = static_cast<const unsigned char*>(r.data);
  const bool ok = r.type == StoredType::BF16 ? all_finite_bf16(bytes, n) : all_finite_f32(bytes, n);
  if (ok) return;
  for (int64_t t = 0; t < r.rows; ++t) {
    for (int64_t i = 0; i < r.width; ++i) {
      const float x = r.at(t * r.width + i);
      if (!std::isfinite(x)) {
        throw InputError("capture " + info_.path + ": dataset /" + layer_path(layer, what) + " sequence " +
                         std::to_string(s) + " token " + std::to_string(t) + " column " +
                         std::to_string(i) + " is " + (std::isnan(x) ? "NaN" : "Inf") +
                         " (row " + std::to_string(s * r.rows + t) + ")");
      }
    }
  }
}

RawRows CaptureReader::read_raw(int64_t layer, int64_t s, const char* what, std::vector<unsigned char>& buf) const {
  const std::string path = layer_path(layer, what);
  RawRows r;
  r.rows = info_.seq_len;
  r.width = width(what);
  {
    std::lock_guard<std::mutex> lock(h5_mutex());
    const auto it = impl_->datasets.find(path);
    if (it == impl_->datasets.end()) throw InputError("capture " + info_.path + ": dataset /" + path + " is missing");
    const Impl::Ds& ds = it->second;
    r.type = ds.type == StoredType::BF16 ? StoredType::BF16 : StoredType::F32;
    buf.resize(r.bytes());
    r.data = buf.data();
    const hid_t fs = H5Dget_space(ds.id);
    hsize_t start[3] = {static_cast<hsize_t>(s), 0, 0};
    hsize_t count[3] = {1, static_cast<hsize_t>(r.rows), static_cast<hsize_t>(r.width)};
    herr_t st = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
    const hid_t ms = H5Screate_simple(3, count, nullptr);
    if (st >= 0) st = H5Dread(ds.id, ds.mem_type, ms, fs, H5P_DEFAULT, buf.data());
    H5Sclose(ms);
    H5Sclose(fs);
    if (st < 0) {
      throw InputError("capture " + info_.path + ": dataset /" + path + ": read of sequence " + std::to_string(s) +
                       " failed (element type " + ds.type_name + ")");
    }
  }
  check_finite(r, layer, s, what);
  return r;
}

namespace {
MatrixR widen(const RawRows& r) {
  MatrixR m(r.rows, r.width);
  for (int64_t i = 0; i < r.rows * r.width; ++i) m.data()[i] = r.at(i);
  return m;
}
}  // namespace

MatrixR CaptureReader::read_hidden(int64_t layer, int64_t s) const {
  std::vector<unsigned char> buf;
  return widen(read_raw(layer, s, "hidden", buf));
}

void CaptureReader::read_latent(int64_t layer, int64_t s, MatrixR& c, MatrixR& k_pe) const {
  std::vector<unsigned char> buf;
  c = widen(read_raw(layer, s, "latent", buf));
  k_pe = widen(read_raw(layer, s, "k_pe", buf));
}

// ---- SequencePrefetch ----

namespace {
// Read buffers outlive a SequencePrefetch: each worker thread keeps its own and the next
// layer's reader takes them again (fresh multi-MB buffers per layer cost page faults and
// fragment the heap).
using BufferPool = std::vector<std::pair<AlignedBuf, std::size_t>>;
BufferPool& thread_buffer_pool() {
  thread_local BufferPool pool;
  return pool;
}
}  // namespace

struct SequencePrefetch::State {
  const CaptureReader* cap = nullptr;
  int64_t layer = 0;
  std::vector<std::string> what;
  std::vector<int64_t> seqs;
  IoMode mode = IoMode::Buffered;
  struct Slot {
    std::vector<AlignedBuf> buf;
    std::vector<std::size_t> cap_bytes;
    std::vector<std::vector<unsigned char>> h5buf;  // H5Dread fallback
    std::vector<RawRows> rows;
    std::exception_ptr error;
    bool ready = false;
  };
  std::vector<Slot> slots;
  std::mutex m;
  std::condition_variable cv;
  std::size_t produced = 0, consumed = 0;  // sequences handed over / taken
  bool stop = false;
  std::thread thread;
  BufferPool* pool = nullptr;  // the constructing thread's, refilled by the destructor

  // Reads sequence s of `what` into the slot's buffer k; returns the view.
  RawRows read(Slot& slot, std::size_t k, int64_t s) {
    const std::string& w = what[k];
    const CaptureReader& c = *cap;
    const std::string path = c.layer_path(layer, w.c_str());
    haddr_t addr = HADDR_UNDEF;
    hsize_t csize = 0;
    RawRows r;
    r.rows = c.info_.seq_len;
    r.width = c.width(w.c_str());
    if (mode != IoMode::Hdf5) {
      std::lock_guard<std::mutex> lock(h5_mutex());
      const auto& ds = c.impl_->datasets.at(path);
      r.type = ds.type;
      if (ds.raw_chunks) {
        hsize_t off[3] = {static_cast<hsize_t>(s), 0, 0};
        unsigned mask = 0;
        if (H5Dget_chunk_info_by_coord(ds.id, off, &mask, &addr, &csize) < 0 || mask != 0) addr = HADDR_UNDEF;
      }
    }
    if (addr == HADDR_UNDEF || csize != r.bytes()) {
      auto& hb = slot.h5buf[k];
      r = c.read_raw(layer, s, w.c_str(), hb);
      return r;  // checked finite by read_raw
    }
    CaptureReader::Impl& im = *c.impl_;
    const bool direct = mode == IoMode::Direct && !im.direct_failed && im.fd_direct >= 0;
    const int fd = direct ? im.fd_direct : im.fd_buffered;
    const uint64_t a0 = direct ? addr / kAlign * kAlign : addr;
    const uint64_t a1 = direct ? (addr + csize + kAlign - 1) / kAlign * kAlign : addr + csize;
    const std::size_t len = static_cast<std::size_t>(a1 - a0);
    if (slot.cap_bytes[k] < len) {
      slot.buf[k] = aligned_buffer(len);
      slot.cap_bytes[k] = len;
    }
    unsigned char* dst = slot.buf[k].get();
    std::size_t got = 0;
    while (got < len) {
      const ssize_t n = ::pread(fd, dst + got, len - got, static_cast<off_t>(a0 + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && direct && got == 0 && errno == EINVAL) {
        im.direct_failed = true;  // the file system refuses O_DIRECT: page cache from now on
        return read(slot, k, s);
      }
      if (n <= 0) break;  // EOF (the aligned end may pass it) or error
      got += static_cast<std::size_t>(n);
    }
    if (got < addr - a0 + csize) {
      throw InputError("capture " + c.info_.path + ": dataset /" + path + ": read of sequence " +
                       std::to_string(s) + " failed (" + std::strerror(errno) + ")");
    }
    r.data = dst + (addr - a0);
    c.check_finite(r, layer, s, w.c_str());
    return r;
  }

  void run() {
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      Slot* slot;
      {
        std::unique_lock<std::mutex> lk(m);
        // The consumer holds the slot of sequence consumed - 1 until its next call.
        cv.wait(lk, [&] { return stop || produced - consumed + 1 < slots.size(); });
        if (stop) return;
        slot = &slots[i % slots.size()];
      }
      std::exception_ptr err;
      std::vector<RawRows> rows(what.size());
      try {
        for (std::size_t k = 0; k < what.size(); ++k) rows[k] = read(*slot, k, seqs[i]);
      } catch (...) {
        err = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lk(m);
        slot->rows = std::move(rows);
        slot->error = err;
        slot->ready = true;
        ++produced;
      }
      cv.notify_all();
      if (err) return;
    }
  }
};

SequencePrefetch::SequencePrefetch(const CaptureReader& cap, int64_t layer, std::vector<std::string> what,
                                   std::vector<int64_t> seqs, int depth)
    : st_(std::make_unique<State>()) {
  State& st = *st_;
  st.cap = &cap;
  st.layer = layer;
  st.what = std::move(what);
  st.seqs = std::move(seqs);
  st.mode = cap.effective_io_mode();
  {
    std::lock_guard<std::mutex> lock(h5_mutex());
    CaptureReader::Impl& im = *cap.impl_;
    if (st.mode == IoMode::Direct && im.fd_direct < 0 && !im.direct_failed) {
      im.fd_direct = ::open(cap.info_.path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
      if (im.fd_direct < 0) im.direct_failed = true;
    }
    if (im.fd_buffered < 0) {
      im.fd_buffered = ::open(cap.info_.path.c_str(), O_RDONLY | O_CLOEXEC);
      if (im.fd_buffered < 0) throw InputError("capture " + cap.info_.path + ": cannot open: " + std::strerror(errno));
      posix_fadvise(im.fd_buffered, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
  }
  st.slots.resize(static_cast<std::size_t>(std::max(1, depth)) + 1);  // +1: the slot the consumer holds
  st.pool = &thread_buffer_pool();
  for (auto& s : st.slots) {
    s.buf.resize(st.what.size());
    s.cap_bytes.assign(st.what.size(), 0);
    s.h5buf.resize(st.what.size());
    for (std::size_t k = 0; k < st.what.size() && !st.pool->empty(); ++k) {
      s.buf[k] = std::move(st.pool->back().first);
      s.cap_bytes[k] = st.pool->back().second;
      st.pool->pop_back();
    }
  }
  st.thread = std::thread([&st] { st.run(); });
}

SequencePrefetch::~SequencePrefetch() {
  {
    std::lock_guard<std::mutex> lk(st_->m);
    st_->stop = true;
  }
  st_->cv.notify_all();
  if (st_->thread.joinable()) st_->thread.join();
  for (auto& s : st_->slots)
    for (std::size_t k = 0; k < s.buf.size(); ++k)
      if (s.buf[k]) st_->pool->emplace_back(std::move(s.buf[k]), s.cap_bytes[k]);
}

const std::vector<RawRows>& SequencePrefetch::next() {
  State& st = *st_;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(st.m);
  if (st.consumed >= st.seqs.size()) throw Error("SequencePrefetch: no sequence left");
  // The slot handed out by the previous call is free again (the consumer moved on): the
  // producer's wait counts it as held until `consumed` moves past it.
  State::Slot& slot = st.slots[st.consumed % st.slots.size()];
  st.cv.wait(lk, [&] { return slot.ready; });
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (slot.error) std::rethrow_exception(slot.error);
  slot.ready = false;
  ++st.consumed;
  st.cv.notify_all();
  return slot.rows;
}

CaptureReader::~CaptureReader() = default;

std::string capture_layer_path(int64_t layer, const std::string& what) {
  return h5::layer_group_name(layer) + "/" + what;
}

CaptureMeta read_capture_attributes(const h5::Group& root, const std::string& where) {
  const std::string schema = root.has_attr("schema") ? root.attr_string("schema") : "<missing>";
  if (schema != kCaptureSchema)
    bad(where, "attribute schema is '" + schema + "', expected '" + std::string(kCaptureSchema) + "'");
  auto optional = [&](const char* name) { return root.has_attr(name) ? root.attr_string(name) : std::string(); };
  CaptureMeta meta;
  meta.model_type = optional("model_type");
  meta.num_layers = root.attr_int("num_layers");
  meta.hidden_size = root.attr_int("hidden_size");
  if (meta.num_layers <= 0) bad(where, "attribute num_layers is " + std::to_string(meta.num_layers) + ", expected > 0");
  if (meta.hidden_size <= 0) bad(where, "attribute hidden_size is " + std::to_string(meta.hidden_size) + ", expected > 0");
  meta.source = optional("source");
  meta.corpus_sha256 = optional("corpus_sha256");
  meta.checkpoint_fingerprint = optional("checkpoint_fingerprint");
  return meta;
}

CaptureReader::CaptureReader(const std::filesystem::path& path)
    : file_(h5::File::open_read(path)), impl_(std::make_unique<Impl>()) {
  info_.path = path.string();
  static_cast<CaptureMeta&>(info_) = read_capture_attributes(file_.root(), info_.path);
  for (const char* g : {"calib", "eval", "reference"}) {
    if (has_group(g)) (void)group_info(g);  // validates every shape of the group
  }
}

bool CaptureReader::has_group(const std::string& group) const {
  std::lock_guard<std::mutex> lock(h5_mutex());
  return file_.root().exists(group);
}

CaptureGroupInfo CaptureReader::group_info(const std::string& group) const {
  const std::string f = file_.path().string();
  if (!has_group(group)) bad(f, "group /" + group + " not found");
  std::lock_guard<std::mutex> lock(h5_mutex());
  const h5::Group g = file_.root().open_group(group);
  CaptureGroupInfo info;
  info.name = group;
  const h5::Dims td = g.open("tokens").dims();
  if (td.size() != 2) bad(f, "dataset /" + group + "/tokens has shape " + shape_str(td) + ", expected [S, T]");
  info.sequences = static_cast<int64_t>(td[0]);
  info.seq_len = static_cast<int64_t>(td[1]);
  const h5::Dims act{td[0], td[1], static_cast<uint64_t>(info_.hidden_size)};
  info.has_attn_out = g.exists(capture_layer_path(0, "attn_out"));
  for (int64_t i = 0; i < info_.num_layers; ++i) {
    const std::string p = capture_layer_path(i, "hidden");
    if (!g.exists(p)) bad(f, "dataset /" + group + "/" + p + " missing (num_layers = " + std::to_string(info_.num_layers) + ")");
    expect_dims(f, "/" + group + "/" + p, g.open(p).dims(), act);
    if (info.has_attn_out) {
      const std::string q = capture_layer_path(i, "attn_out");
      if (!g.exists(q)) bad(f, "dataset /" + group + "/" + q + " missing");
      expect_dims(f, "/" + group + "/" + q, g.open(q).dims(), act);
    }
  }
  if (g.exists("logits")) {
    const h5::Dims ld = g.open("logits").dims();
    if (ld.size() != 3 || ld[0] != td[0] || ld[1] != td[1])
      bad(f, "dataset /" + group + "/logits has shape " + shape_str(ld) + ", expected [" + std::to_string(td[0]) + ", " +
                 std::to_string(td[1]) + ", V]");
    info.vocab = static_cast<int64_t>(ld[2]);
  }
  return info;
}

std::vector<int32_t> CaptureReader::tokens(const std::string& group, int64_t seq) const {
  std::lock_guard<std::mutex> lock(h5_mutex());
  return file_.root().open_group(group).open("tokens").read_rows<int32_t>(static_cast<uint64_t>(seq), 1);
}
std::vector<float> CaptureReader::hidden(const std::string& group, int64_t layer, int64_t seq) const {
  std::lock_guard<std::mutex> lock(h5_mutex());
  return file_.root().open_group(group).open(capture_layer_path(layer, "hidden")).read_rows<float>(static_cast<uint64_t>(seq), 1);
}
std::vector<float> CaptureReader::attn_out(const std::string& group, int64_t layer, int64_t seq) const {
  std::lock_guard<std::mutex> lock(h5_mutex());
  return file_.root().open_group(group).open(capture_layer_path(layer, "attn_out")).read_rows<float>(static_cast<uint64_t>(seq), 1);
}
std::vector<float> CaptureReader::logits(const std::string& group, int64_t seq) const {
  std::lock_guard<std::mutex> lock(h5_mutex());
  return file_.root().open_group(group).open("logits").read_rows<float>(static_cast<uint64_t>(seq), 1);
}

void write_capture_attributes(h5::Group& root, const CaptureMeta& meta) {
  root.set_attr("schema", kCaptureSchema);
  root.set_attr("model_type", meta.model_type);
  root.set_attr("num_layers", meta.num_layers);
  root.set_attr("hidden_size", meta.hidden_size);
  root.set_attr("source", meta.source);
  root.set_attr("corpus_sha256", meta.corpus_sha256);
  if (!meta.checkpoint_fingerprint.empty()) root.set_attr("checkpoint_fingerprint", meta.checkpoint_fingerprint);
}

void write_dense_capture(const model::DenseModel& m, const CaptureMeta& meta, const std::vector<CaptureGroupSpec>& groups,
                         const std::filesystem::path& out,
                         const std::function<void(const std::string&, int64_t, int64_t)>& progress) {
  const int64_t L = m.cfg.num_hidden_layers, D = m.cfg.hidden_size, V = m.cfg.vocab_size;
  h5::write_atomically(out, [&](h5::File& file) {
      h5::Group& root = file.root();
      CaptureMeta written = meta;
      written.num_layers = L;
      written.hidden_size = D;
      write_capture_attributes(root, written);
      for (const CaptureGroupSpec& spec : groups) {
        const uint64_t S = spec.sequences.size();
        if (S == 0) throw InputError("capture group '" + spec.name + "' has no sequences");
        const uint64_t T = spec.sequences.front().size();
        std::vector<int32_t> toks;
        for (const auto& s : spec.sequences) {
          if (s.size() != T)
            throw InputError("capture group '" + spec.name + "': sequences of different lengths (" +
                             std::to_string(s.size()) + " vs " + std::to_string(T) + ")");
          toks.insert(toks.end(), s.begin(), s.end());
        }
        h5::Group g = root.create_group(spec.name);
        g.write<int32_t>("tokens", {S, T}, toks.data());
        std::vector<h5::Dataset> hid, att;
        for (int64_t i = 0; i < L; ++i) {
          hid.push_back(g.create<float>(capture_layer_path(i, "hidden"), {S, T, static_cast<uint64_t>(D)}, 1));
          if (spec.reference)
            att.push_back(g.create<float>(capture_layer_path(i, "attn_out"), {S, T, static_cast<uint64_t>(D)}, 1));
        }
        std::optional<h5::Dataset> logits_ds;
        if (spec.reference) logits_ds = g.create<float>("logits", {S, T, static_cast<uint64_t>(V)}, 1);
        for (uint64_t s = 0; s < S; ++s) {
          model::ForwardTrace tr;
          tr.want_hidden = true;
          tr.want_attn_out = spec.reference;
          const MatrixR logits = model::dense_forward(m, spec.sequences[s], &tr);
          for (int64_t i = 0; i < L; ++i) {
            hid[static_cast<size_t>(i)].write_rows<float>(s, 1, to_float(tr.hidden[static_cast<size_t>(i)]).data());
            if (spec.reference)
              att[static_cast<size_t>(i)].write_rows<float>(s, 1, to_float(tr.attn_out[static_cast<size_t>(i)]).data());
          }
          if (logits_ds) logits_ds->write_rows<float>(s, 1, to_float(logits).data());
          if (progress) progress(spec.name, static_cast<int64_t>(s + 1), static_cast<int64_t>(S));
        }
      }
  });
}

}  // namespace mla::io
