#include "tools/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "runtime/error.h"

namespace tools {

namespace tb {

namespace {

// Reflected CRC-32C table (polynomial 0x1EDC6F41, reversed 0x82F63B78).
std::array<uint32_t, 256> make_table() {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[i] = c;
    }
    return t;
}

void put_tag(std::string& out, int field, int wire_type) {
    put_varint(out, static_cast<uint64_t>(field << 3 | wire_type));
}

void put_fixed(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }  // LE host

void put_bytes(std::string& out, int field, const std::string& bytes) {
    put_tag(out, field, 2);
    put_varint(out, bytes.size());
    out += bytes;
}

std::string event_header(double wall_time, int64_t step) {
    std::string e;
    put_tag(e, 1, 1);  // wall_time: double (fixed64)
    put_fixed(e, &wall_time, 8);
    if (step != 0) {  // proto3: a zero int64 is not written
        put_tag(e, 2, 0);
        put_varint(e, static_cast<uint64_t>(step));
    }
    return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
    static const std::array<uint32_t, 256> table = make_table();
    const auto* p = static_cast<const uint8_t*>(data);
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
    const uint32_t c = crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

void put_varint(std::string& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<char>((v & 0x7F) | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<char>(v));
}

std::string tfrecord(const std::string& data) {
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "TFRecord fields are little-endian");
    std::string r;
    const uint64_t len = data.size();
    put_fixed(r, &len, 8);
    const uint32_t len_crc = masked_crc32c(&len, 8);
    put_fixed(r, &len_crc, 4);
    r += data;
    const uint32_t data_crc = masked_crc32c(data.data(), data.size());
    put_fixed(r, &data_crc, 4);
    return r;
}

std::string file_version_event(double wall_time) {
    std::string e = event_header(wall_time, 0);
    put_bytes(e, 3, "brain.Event:2");
    return e;
}

std::string scalars_event(double wall_time, int64_t step, const Scalars& values) {
    std::string summary;
    for (const auto& kv : values) {
        std::string v;
        put_bytes(v, 1, kv.first);
        put_tag(v, 2, 5);  // simple_value: float (fixed32)
        const float f = static_cast<float>(kv.second);
        put_fixed(v, &f, 4);
        put_bytes(summary, 1, v);
    }
    std::string e = event_header(wall_time, step);
    put_bytes(e, 5, summary);
    return e;
}

std::string session_start_event(double wall_time, int64_t step) {
    std::string log;
    put_tag(log, 1, 0);  // status = START
    put_varint(log, 1);
    std::string e = event_header(wall_time, step);
    put_bytes(e, 7, log);
    return e;
}

}  // namespace tb

namespace {
double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t resume_step) {
    char host[256] = "localhost";
    if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
    host[sizeof(host) - 1] = 0;
    path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<long long>(std::time(nullptr))) + "." + host;
    f_ = std::fopen(path_.c_str(), "ab");
    SF_CHECK(f_ != nullptr, "cannot write the TensorBoard file %s: %s", path_.c_str(), std::strerror(errno));
    append(tb::file_version_event(unix_seconds()));
    if (resume_step > 0) append(tb::session_start_event(unix_seconds(), resume_step));
}

TensorBoardWriter::~TensorBoardWriter() {
    if (f_) std::fclose(f_);
}

void TensorBoardWriter::write(int64_t step, const tb::Scalars& values) {
    append(tb::scalars_event(unix_seconds(), step, values));
}

void TensorBoardWriter::append(const std::string& event) {
    const std::string rec = tb::tfrecord(event);
    SF_CHECK(std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size() && std::fflush(f_) == 0,
             "cannot write the TensorBoard file %s: %s", path_.c_str(), std::strerror(errno));
}

}  // namespace tools
