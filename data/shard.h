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
// holds none.
std::vector<std::string> list_shards(const std::string& dir);

}  // namespace data
