// Shard writer (docs/FORMAT.md). Streams pixel records to `path.tmp` behind a zeroed header
// page, keeps labels and CRCs in memory (76 bytes per record), and on finish() appends the
// label and CRC sections, writes the real header, fsyncs, renames to `path` and fsyncs the folder.
// A writer destroyed without finish() removes its temporary file, so a crash or an error never
// leaves a file that looks like a shard.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "data/crc32.h"
#include "data/shard.h"
#include "data/shard_format.h"
#include "data/shard_io.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace data {

using namespace shard_detail;

struct ShardWriter::Impl {
    std::string path, tmp;
    ShardSpec spec;
    FILE* f = nullptr;
    size_t stored_bytes = 0;
    size_t count = 0;
    bool finished = false;
    bool broken = false;          // a write failed part-way: the file layout is unknown, only discard remains
    std::vector<uint8_t> packed;  // one record's stored pixels (quant4 only)
    std::vector<uint8_t> labels;  // count * kLabelRecordBytes
    std::vector<uint32_t> crcs;   // count

    void write(const void* p, size_t n) {
        if (std::fwrite(p, 1, n, f) == n) return;
        broken = true;
        SF_FAIL("%s: write failed: %s", tmp.c_str(), std::strerror(errno));
    }
    void discard() {
        if (f) std::fclose(f);
        f = nullptr;
        if (std::remove(tmp.c_str()) != 0 && errno != ENOENT)
            SF_LOG_ERROR("%s: cannot remove temporary file: %s", tmp.c_str(), std::strerror(errno));
    }
};

ShardWriter::ShardWriter(const std::string& path, const ShardSpec& spec) : impl_(new Impl) {
    Impl& m = *impl_;
    m.path = path;
    m.tmp = path + ".tmp";
    m.spec = spec;
    try {
        validate_spec(spec, path);
        m.stored_bytes = stored_pixel_bytes(spec);
        if (spec.quant4) m.packed.resize(m.stored_bytes);
        m.f = std::fopen(m.tmp.c_str(), "wb");
        SF_CHECK(m.f, "%s: cannot create: %s", m.tmp.c_str(), std::strerror(errno));
        std::setvbuf(m.f, nullptr, _IOFBF, 1 << 20);
        const std::vector<uint8_t> zeros(kShardPixelsOffset, 0);  // header page, rewritten by finish()
        m.write(zeros.data(), zeros.size());
    } catch (...) {
        if (m.f) m.discard();
        delete impl_;
        throw;
    }
}

ShardWriter::~ShardWriter() {
    if (!impl_->finished) impl_->discard();
    delete impl_;
}

size_t ShardWriter::count() const { return impl_->count; }

void ShardWriter::add(const uint8_t* pixels, const Label& label) {
    Impl& m = *impl_;
    SF_CHECK(!m.finished, "%s: add() after finish()", m.path.c_str());
    SF_CHECK(!m.broken, "%s: add() after a failed write", m.path.c_str());
    SF_CHECK(pixels != nullptr, "%s: record %zu: null pixels", m.path.c_str(), m.count);
    validate_label(label, m.spec.height, m.spec.width, m.path + ": record " + std::to_string(m.count));
    const uint8_t* stored = pixels;
    if (m.spec.quant4) {
        // Keep each value's high nibble (the original's `gray & 0xF0`), two values per byte.
        for (size_t j = 0; j < m.stored_bytes; ++j)
            m.packed[j] = static_cast<uint8_t>((pixels[2 * j] & 0xF0) | (pixels[2 * j + 1] >> 4));
        stored = m.packed.data();
    }
    uint8_t rec[kLabelRecordBytes];
    encode_label(label, rec);
    m.write(stored, m.stored_bytes);
    m.labels.insert(m.labels.end(), rec, rec + kLabelRecordBytes);
    m.crcs.push_back(crc32(rec, kLabelRecordBytes, crc32(stored, m.stored_bytes)));
    ++m.count;
}

void ShardWriter::finish() {
    Impl& m = *impl_;
    SF_CHECK(!m.finished, "%s: finish() called twice", m.path.c_str());
    SF_CHECK(!m.broken, "%s: finish() after a failed write", m.path.c_str());
    const Layout lay = layout_for(m.count, m.stored_bytes);
    const size_t pad = static_cast<size_t>(lay.labels_offset - (lay.pixels_offset + m.count * m.stored_bytes));
    const uint8_t zeros[kSectionAlign] = {};
    m.write(zeros, pad);
    m.write(m.labels.data(), m.labels.size());
    std::vector<uint8_t> crc_bytes(4 * m.count);
    for (size_t i = 0; i < m.count; ++i) store_u32le(crc_bytes.data() + 4 * i, m.crcs[i]);
    m.write(crc_bytes.data(), crc_bytes.size());
    uint8_t header[kShardHeaderBytes];
    encode_header(m.spec, m.count, header);
    if (std::fseek(m.f, 0, SEEK_SET) != 0) {
        m.broken = true;
        SF_FAIL("%s: seek failed: %s", m.tmp.c_str(), std::strerror(errno));
    }
    m.write(header, sizeof(header));
    m.broken = true;  // until the rename: any failure below leaves only discard()
    SF_CHECK(std::fflush(m.f) == 0 && ::fsync(::fileno(m.f)) == 0, "%s: flush/fsync failed: %s", m.tmp.c_str(),
             std::strerror(errno));
    const int rc = std::fclose(m.f);
    m.f = nullptr;
    SF_CHECK(rc == 0, "%s: close failed: %s", m.tmp.c_str(), std::strerror(errno));
    SF_CHECK(std::rename(m.tmp.c_str(), m.path.c_str()) == 0, "%s: rename to %s failed: %s", m.tmp.c_str(),
             m.path.c_str(), std::strerror(errno));
    m.finished = true;
    const std::string dir = std::filesystem::path(m.path).parent_path().string();
    if (!fsync_dir(dir)) SF_LOG_WARN("%s: fsync of folder '%s' failed", m.path.c_str(), dir.c_str());
}

}  // namespace data
