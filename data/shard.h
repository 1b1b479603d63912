// Compact shards (docs/FORMAT.md): a versioned header, uint8 pixels (gray or RGB; the valid mask
// is the letterbox rectangle in the label), fixed-size label records, CRC32 per record.
// Readers memory-map the file and validate everything they hand out; every error names the
// file, the record and what was expected.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/label.h"

namespace data {

// Format constants (docs/FORMAT.md). Version 1 is the only version this build reads or writes.
constexpr uint32_t kShardVersion = 1;
constexpr size_t kShardHeaderBytes = 128;    // fixed header, CRC32 in its last 4 bytes
constexpr size_t kShardPixelsOffset = 4096;  // pixel records start on a page boundary
constexpr size_t kLabelRecordBytes = 72;     // one data::Label, little-endian, field by field
constexpr int kShardMaxDim = 16384;          // height and width limit
const char* const kShardExtension = ".sfshard";

struct ShardSpec {
    int height = 256;        // letterbox canvas
    int width = 512;
    int channels = 1;        // pixel channels stored: 1 (gray) or 3 (RGB); the mask is not stored
    bool quant4 = false;     // 4-bit pixels (the original's bits_to_keep: 4), two per byte
    bool operator==(const ShardSpec& o) const {
        return height == o.height && width == o.width && channels == o.channels && quant4 == o.quant4;
    }
};

// Throws naming the problem when a label is unusable for a (height, width) canvas: non-finite
// coordinates, centres outside the image, num_fakes outside 0..kMaxFakeGaps, an empty or
// out-of-image valid rectangle. `where` prefixes the message (file and record).
void validate_label(const Label& l, int height, int width, const std::string& where);

// Throws naming `where` when a spec cannot be stored: channels not 1|3, height/width outside
// 1..kShardMaxDim, or quant4 with an odd number of pixel bytes per sample.
void validate_spec(const ShardSpec& spec, const std::string& where);

// Bytes one record's pixels occupy in the file: height*width*channels, halved when quant4.
size_t stored_pixel_bytes(const ShardSpec& spec);

// The 72-byte little-endian label record (docs/FORMAT.md), independent of host layout.
void encode_label(const Label& l, uint8_t out[kLabelRecordBytes]);
Label decode_label(const uint8_t in[kLabelRecordBytes]);

class ShardWriter {
public:
    // Writes to `path + ".tmp"`; finish() makes it appear at `path` atomically.
    ShardWriter(const std::string& path, const ShardSpec& spec);
    ~ShardWriter();  // without finish(): removes the temporary file
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;

    // pixels: height*width*channels bytes, row-major HWC (quantised on write when quant4).
    void add(const uint8_t* pixels, const Label& label);
    void finish();
    size_t count() const;

private:
    struct Impl;
    Impl* impl_;
};

class ShardReader {
public:
    explicit ShardReader(const std::string& path);   // maps and validates header and sizes
    // The same reader over a shard image already in memory (fuzzing, tests); `data` must outlive
    // the reader; `name` stands for the file in messages.
    ShardReader(const uint8_t* data, size_t size, const std::string& name);
    ~ShardReader();
    ShardReader(ShardReader&&) noexcept;
    ShardReader(const ShardReader&) = delete;
    ShardReader& operator=(const ShardReader&) = delete;

    const std::string& path() const;
    const ShardSpec& spec() const;
    size_t count() const;
    size_t pixel_bytes() const;   // height*width*channels (unpacked)

    // Checks record i's CRC and label, then writes its unpacked pixels to `out`
    // (pixel_bytes()) and returns its label. Throws naming file and record on any problem.
    Label read(size_t i, uint8_t* out) const;

private:
    struct Impl;
    Impl* impl_;
};

// The *.sfshard files of a directory, sorted by name. Throws if the directory is missing or
// holds none (an empty dataset is an error; a shard with count 0 on its own is valid).
std::vector<std::string> list_shards(const std::string& dir);

}  // namespace data
