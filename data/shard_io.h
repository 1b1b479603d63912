// File helpers shared by the data formats (shards, NPY): a read-only memory mapping and
// little-endian field access that never assumes alignment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace data {

// A whole file mapped read-only (MAP_PRIVATE). An empty file maps to data() == nullptr, size 0.
// The mapping lives as long as the object; truncating the file underneath it is undefined
// (SIGBUS), as with any mmap reader.
class MappedFile {
public:
    MappedFile() = default;
    explicit MappedFile(const std::string& path);  // throws naming the file
    ~MappedFile();
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    void release();
    std::string path_;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

inline uint32_t load_u32le(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
           (static_cast<uint32_t>(p[3]) << 24);
}
inline uint64_t load_u64le(const uint8_t* p) {
    return static_cast<uint64_t>(load_u32le(p)) | (static_cast<uint64_t>(load_u32le(p + 4)) << 32);
}
inline float load_f32le(const uint8_t* p) {
    const uint32_t u = load_u32le(p);
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline void store_u32le(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void store_u64le(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void store_f32le(uint8_t* p, float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    store_u32le(p, u);
}

// fsyncs a directory so that a rename inside it is durable; returns false on failure.
bool fsync_dir(const std::string& dir);

}  // namespace data
