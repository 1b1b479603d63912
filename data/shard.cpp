// Shard reader, label records, spec and label validation, directory listing (docs/FORMAT.md).
// The reader validates the whole header once at open (magic, version, header CRC, every field
// against the layout the version defines, the file length), so that read(i) only has to check
// record i: its CRC, then its label.
#include "data/shard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "data/crc32.h"
#include "data/shard_format.h"
#include "data/shard_io.h"
#include "runtime/error.h"

namespace data {

using namespace shard_detail;

// ---- labels and specs ----

namespace {

void check_coord(const char* name, float v, int limit, const char* axis, const std::string& where) {
    SF_CHECK(v >= 0.0f && v < static_cast<float>(limit), "%s: label field %s = %g outside the canvas %s range [0, %d)",
             where.c_str(), name, static_cast<double>(v), axis, limit);
}

}  // namespace

void validate_label(const Label& l, int height, int width, const std::string& where) {
    const char* w = where.c_str();
    static const char* const kFakeX[kMaxFakeGaps] = {"fake_x[0]", "fake_x[1]", "fake_x[2]", "fake_x[3]"};
    static const char* const kFakeY[kMaxFakeGaps] = {"fake_y[0]", "fake_y[1]", "fake_y[2]", "fake_y[3]"};
    const std::pair<const char*, float> fields[] = {
        {"gap_x", l.gap_x},       {"gap_y", l.gap_y},         {"slider_x", l.slider_x},
        {"slider_y", l.slider_y}, {"angle_rad", l.angle_rad}, {"rect_x0", l.rect_x0},
        {"rect_y0", l.rect_y0},   {"rect_x1", l.rect_x1},     {"rect_y1", l.rect_y1}};
    for (const auto& f : fields)
        SF_CHECK(std::isfinite(f.second), "%s: label field %s = %g is not finite", w, f.first,
                 static_cast<double>(f.second));
    for (int k = 0; k < kMaxFakeGaps; ++k) {
        SF_CHECK(std::isfinite(l.fake_x[k]), "%s: label field %s = %g is not finite", w, kFakeX[k],
                 static_cast<double>(l.fake_x[k]));
        SF_CHECK(std::isfinite(l.fake_y[k]), "%s: label field %s = %g is not finite", w, kFakeY[k],
                 static_cast<double>(l.fake_y[k]));
    }
    SF_CHECK(l.num_fakes >= 0 && l.num_fakes <= kMaxFakeGaps, "%s: label field num_fakes = %d outside 0..%d", w,
             l.num_fakes, kMaxFakeGaps);
    check_coord("gap_x", l.gap_x, width, "x", where);
    check_coord("gap_y", l.gap_y, height, "y", where);
    check_coord("slider_x", l.slider_x, width, "x", where);
    check_coord("slider_y", l.slider_y, height, "y", where);
    for (int k = 0; k < l.num_fakes; ++k) {
        check_coord(kFakeX[k], l.fake_x[k], width, "x", where);
        check_coord(kFakeY[k], l.fake_y[k], height, "y", where);
    }
    SF_CHECK(l.rect_x0 >= 0 && l.rect_x0 < l.rect_x1 && l.rect_x1 <= static_cast<float>(width),
             "%s: label valid rectangle rect_x0..rect_x1 = [%g, %g) is empty or outside [0, %d]", w,
             static_cast<double>(l.rect_x0), static_cast<double>(l.rect_x1), width);
    SF_CHECK(l.rect_y0 >= 0 && l.rect_y0 < l.rect_y1 && l.rect_y1 <= static_cast<float>(height),
             "%s: label valid rectangle rect_y0..rect_y1 = [%g, %g) is empty or outside [0, %d]", w,
             static_cast<double>(l.rect_y0), static_cast<double>(l.rect_y1), height);
}

void validate_spec(const ShardSpec& s, const std::string& where) {
    SF_CHECK(s.channels == 1 || s.channels == 3, "%s: channels = %d, expected 1 (gray) or 3 (RGB)", where.c_str(),
             s.channels);
    SF_CHECK(s.height >= 1 && s.height <= kShardMaxDim && s.width >= 1 && s.width <= kShardMaxDim,
             "%s: canvas %dx%d (WxH) outside 1..%d", where.c_str(), s.width, s.height, kShardMaxDim);
    SF_CHECK(!s.quant4 || (static_cast<size_t>(s.height) * s.width * s.channels) % 2 == 0,
             "%s: quant4 needs an even number of pixel values per sample, %dx%dx%d is odd", where.c_str(), s.height,
             s.width, s.channels);
}

size_t stored_pixel_bytes(const ShardSpec& s) {
    const size_t n = static_cast<size_t>(s.height) * static_cast<size_t>(s.width) * static_cast<size_t>(s.channels);
    return s.quant4 ? n / 2 : n;
}

void encode_label(const Label& l, uint8_t out[kLabelRecordBytes]) {
    uint8_t* p = out;
    auto f = [&p](float v) {
        store_f32le(p, v);
        p += 4;
    };
    f(l.gap_x), f(l.gap_y), f(l.slider_x), f(l.slider_y), f(l.angle_rad);
    store_u32le(p, static_cast<uint32_t>(l.num_fakes));
    p += 4;
    for (float v : l.fake_x) f(v);
    for (float v : l.fake_y) f(v);
    f(l.rect_x0), f(l.rect_y0), f(l.rect_x1), f(l.rect_y1);
}

Label decode_label(const uint8_t in[kLabelRecordBytes]) {
    Label l;
    const uint8_t* p = in;
    auto f = [&p]() {
        const float v = load_f32le(p);
        p += 4;
        return v;
    };
    l.gap_x = f(), l.gap_y = f(), l.slider_x = f(), l.slider_y = f(), l.angle_rad = f();
    l.num_fakes = static_cast<int32_t>(load_u32le(p));
    p += 4;
    for (float& v : l.fake_x) v = f();
    for (float& v : l.fake_y) v = f();
    l.rect_x0 = f(), l.rect_y0 = f(), l.rect_x1 = f(), l.rect_y1 = f();
    return l;
}

namespace shard_detail {

void encode_header(const ShardSpec& spec, uint64_t count, uint8_t out[kShardHeaderBytes]) {
    std::memset(out, 0, kShardHeaderBytes);
    const uint64_t pb = stored_pixel_bytes(spec);
    const Layout lay = layout_for(count, pb);
    std::memcpy(out + kOffMagic, kMagic, sizeof(kMagic));
    store_u32le(out + kOffVersion, kShardVersion);
    store_u32le(out + kOffHeaderBytes, static_cast<uint32_t>(kShardHeaderBytes));
    store_u64le(out + kOffCount, count);
    store_u32le(out + kOffHeight, static_cast<uint32_t>(spec.height));
    store_u32le(out + kOffWidth, static_cast<uint32_t>(spec.width));
    store_u32le(out + kOffChannels, static_cast<uint32_t>(spec.channels));
    store_u32le(out + kOffFlags, spec.quant4 ? kFlagQuant4 : 0u);
    store_u32le(out + kOffLabelBytes, static_cast<uint32_t>(kLabelRecordBytes));
    store_u32le(out + kOffPixelBytes, static_cast<uint32_t>(pb));
    store_u64le(out + kOffPixelsOffset, lay.pixels_offset);
    store_u64le(out + kOffLabelsOffset, lay.labels_offset);
    store_u64le(out + kOffCrcsOffset, lay.crcs_offset);
    store_u64le(out + kOffFileBytes, lay.file_bytes);
    store_u32le(out + kHeaderCrcOffset, crc32(out, kHeaderCrcOffset));
}

}  // namespace shard_detail

// ---- reader ----

struct ShardReader::Impl {
    MappedFile file;  // empty for an in-memory reader
    std::string path;
    const uint8_t* base = nullptr;
    size_t size = 0;
    ShardSpec spec;
    size_t count = 0;
    size_t pixel_bytes = 0;   // unpacked
    size_t stored_bytes = 0;  // per record in the file
    Layout layout;

    void open();
    void check_u64(const char* field, uint64_t got, uint64_t want) const {
        SF_CHECK(got == want, "%s: header field %s = %llu, expected %llu for this layout", path.c_str(), field,
                 static_cast<unsigned long long>(got), static_cast<unsigned long long>(want));
    }
};

void ShardReader::Impl::open() {
    const char* p = path.c_str();
    SF_CHECK(size >= kShardHeaderBytes, "%s: truncated: %zu bytes, the header alone needs %zu", p, size,
             kShardHeaderBytes);
    SF_CHECK(std::memcmp(base + kOffMagic, kMagic, sizeof(kMagic)) == 0, "%s: not a slidefuse shard (bad magic)", p);
    const uint32_t version = load_u32le(base + kOffVersion);
    SF_CHECK(version == kShardVersion, "%s: unsupported shard version %u (this build reads version %u)", p, version,
             kShardVersion);
    const uint32_t stored_crc = load_u32le(base + kHeaderCrcOffset), crc = crc32(base, kHeaderCrcOffset);
    SF_CHECK(stored_crc == crc, "%s: header CRC mismatch (stored 0x%08x, computed 0x%08x): the header is corrupt", p,
             stored_crc, crc);
    check_u64("header_bytes", load_u32le(base + kOffHeaderBytes), kShardHeaderBytes);
    for (size_t off = kOffReserved; off < kHeaderCrcOffset; ++off)
        SF_CHECK(base[off] == 0, "%s: reserved header byte %zu is not zero", p, off);
    const uint32_t flags = load_u32le(base + kOffFlags);
    SF_CHECK((flags & ~kKnownFlags) == 0, "%s: unknown header flags 0x%x", p, flags & ~kKnownFlags);
    const uint32_t h = load_u32le(base + kOffHeight), w = load_u32le(base + kOffWidth);
    const uint32_t c = load_u32le(base + kOffChannels);
    SF_CHECK(h >= 1 && h <= kShardMaxDim && w >= 1 && w <= kShardMaxDim && (c == 1 || c == 3),
             "%s: header dims height %u, width %u, channels %u outside 1..%d, 1..%d, {1, 3}", p, h, w, c, kShardMaxDim,
             kShardMaxDim);
    spec.height = static_cast<int>(h);
    spec.width = static_cast<int>(w);
    spec.channels = static_cast<int>(c);
    spec.quant4 = (flags & kFlagQuant4) != 0;
    validate_spec(spec, path);
    pixel_bytes = static_cast<size_t>(h) * w * c;
    stored_bytes = stored_pixel_bytes(spec);
    check_u64("label_bytes", load_u32le(base + kOffLabelBytes), kLabelRecordBytes);
    check_u64("pixel_bytes", load_u32le(base + kOffPixelBytes), stored_bytes);
    // The count is bounded by the file length before any product is formed, so nothing overflows.
    const uint64_t n = load_u64le(base + kOffCount);
    const uint64_t per_record = stored_bytes + kLabelRecordBytes + 4;
    SF_CHECK(n <= size / per_record, "%s: truncated: header count %llu records of %llu bytes do not fit in %zu bytes",
             p, static_cast<unsigned long long>(n), static_cast<unsigned long long>(per_record), size);
    count = static_cast<size_t>(n);
    layout = layout_for(n, stored_bytes);
    check_u64("pixels_offset", load_u64le(base + kOffPixelsOffset), layout.pixels_offset);
    check_u64("labels_offset", load_u64le(base + kOffLabelsOffset), layout.labels_offset);
    check_u64("crcs_offset", load_u64le(base + kOffCrcsOffset), layout.crcs_offset);
    check_u64("file_bytes", load_u64le(base + kOffFileBytes), layout.file_bytes);
    SF_CHECK(size == layout.file_bytes, "%s: file is %zu bytes, the header describes %llu (%s)", p, size,
             static_cast<unsigned long long>(layout.file_bytes),
             size < layout.file_bytes ? "truncated" : "trailing data");
}

ShardReader::ShardReader(const std::string& path) : impl_(new Impl) {
    std::unique_ptr<Impl> guard(impl_);
    impl_->path = path;
    impl_->file = MappedFile(path);
    impl_->base = impl_->file.data();
    impl_->size = impl_->file.size();
    impl_->open();
    guard.release();
}

ShardReader::ShardReader(const uint8_t* data, size_t size, const std::string& name) : impl_(new Impl) {
    std::unique_ptr<Impl> guard(impl_);
    impl_->path = name;
    impl_->base = data;
    impl_->size = data ? size : 0;
    impl_->open();
    guard.release();
}

ShardReader::~ShardReader() { delete impl_; }
ShardReader::ShardReader(ShardReader&& o) noexcept : impl_(std::exchange(o.impl_, nullptr)) {}

const std::string& ShardReader::path() const { return impl_->path; }
const ShardSpec& ShardReader::spec() const { return impl_->spec; }
size_t ShardReader::count() const { return impl_->count; }
size_t ShardReader::pixel_bytes() const { return impl_->pixel_bytes; }

Label ShardReader::read(size_t i, uint8_t* out) const {
    const Impl& m = *impl_;
    SF_CHECK(i < m.count, "%s: record %zu out of range (the shard holds %zu)", m.path.c_str(), i, m.count);
    const uint8_t* px = m.base + m.layout.pixels_offset + i * m.stored_bytes;
    const uint8_t* lab = m.base + m.layout.labels_offset + i * kLabelRecordBytes;
    const uint32_t stored = load_u32le(m.base + m.layout.crcs_offset + 4 * i);
    const uint32_t crc = crc32(lab, kLabelRecordBytes, crc32(px, m.stored_bytes));
    SF_CHECK(stored == crc, "%s: record %zu: CRC mismatch (stored 0x%08x, computed 0x%08x): the record is corrupt",
             m.path.c_str(), i, stored, crc);
    const Label l = decode_label(lab);
    validate_label(l, m.spec.height, m.spec.width, m.path + ": record " + std::to_string(i));
    if (m.spec.quant4) {
        // Two pixels per byte, first in the high nibble; each comes back as its high nibble (v & 0xF0).
        for (size_t j = 0; j < m.stored_bytes; ++j) {
            const uint8_t b = px[j];
            out[2 * j] = static_cast<uint8_t>(b & 0xF0);
            out[2 * j + 1] = static_cast<uint8_t>(b << 4);
        }
    } else {
        std::memcpy(out, px, m.pixel_bytes);
    }
    return l;
}

// ---- directories ----

std::vector<std::string> list_shards(const std::string& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    SF_CHECK(fs::is_directory(dir, ec), "%s: no such directory (expected a folder of *%s files)", dir.c_str(),
             kShardExtension);
    std::vector<std::string> out;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path& p = it->path();
        if (p.extension() == kShardExtension && it->is_regular_file(ec)) out.push_back(p.string());
    }
    SF_CHECK(!ec, "%s: cannot list: %s", dir.c_str(), ec.message().c_str());
    SF_CHECK(!out.empty(), "%s: holds no *%s files (empty dataset)", dir.c_str(), kShardExtension);
    std::sort(out.begin(), out.end());
    return out;
}

}  // namespace data
