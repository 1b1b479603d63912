// libFuzzer target: the shard reader on arbitrary bytes (its in-memory constructor), then every
// record read: each must either succeed or throw rt::Error naming the problem. Built and run by
// tools/fuzz/run_fuzz.sh.
//
// Input: one mode byte, then the shard image. The header and record CRCs would stop almost every
// mutation at the first check, so mode bit 0 recomputes the header CRC and bit 1 the record CRCs
// (where the header's offsets allow) before parsing; with mode 0 the bytes are parsed as given.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/crc32.h"
#include "data/shard.h"
#include "data/shard_io.h"
#include "runtime/error.h"

namespace {

void fix_crcs(std::vector<uint8_t>& b, uint8_t mode) {
    if (b.size() < data::kShardHeaderBytes) return;
    if (mode & 2) {
        const uint64_t count = data::load_u64le(&b[16]), pb = data::load_u32le(&b[44]);
        const uint64_t px = data::load_u64le(&b[48]), lab = data::load_u64le(&b[56]), crcs = data::load_u64le(&b[64]);
        const uint64_t n = b.size();
        for (uint64_t i = 0; i < count && i < 64; ++i) {
            // Every offset bounded by the buffer before use; products stay far below 2^64.
            if (px > n || lab > n || crcs > n || pb > n) break;
            const uint64_t p0 = px + i * pb, l0 = lab + i * data::kLabelRecordBytes, c0 = crcs + 4 * i;
            if (p0 + pb > n || l0 + data::kLabelRecordBytes > n || c0 + 4 > n) break;
            const uint32_t c = data::crc32(&b[l0], data::kLabelRecordBytes, data::crc32(&b[p0], pb));
            data::store_u32le(&b[c0], c);
        }
    }
    if (mode & 1) data::store_u32le(&b[124], data::crc32(b.data(), 124));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    // A private copy, exactly the shard's size, so that ASan flags any read past its end.
    std::vector<uint8_t> buf(data + 1, data + size);
    fix_crcs(buf, data[0]);
    try {
        const data::ShardReader r(buf.data(), buf.size(), "fuzz.sfshard");
        std::vector<uint8_t> px(r.pixel_bytes());
        for (size_t i = 0; i < r.count() + 1 && i < 64; ++i) {  // one past the end must throw, not read
            data::Label l;
            try {
                l = r.read(i, px.data());
            } catch (const rt::Error&) {
                continue;
            }
            if (i >= r.count()) __builtin_trap();
            // read() validated the label: a second validation must agree (an escaping throw aborts).
            data::validate_label(l, r.spec().height, r.spec().width, "fuzz");
        }
    } catch (const rt::Error&) {
    }
    return 0;
}
