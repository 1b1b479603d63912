// Safetensors files: 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the raw little-endian data. Used for goldens now, checkpoints later.
// Loading validates everything (header size, JSON, dtypes, offsets inside the file, sizes
// matching shapes) and throws rt::Error naming the file and the problem.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace rt {

enum class DType { F32, F64, I64, I32, BF16, U8 };
const char* dtype_name(DType d);
size_t dtype_size(DType d);

struct TensorData {
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
    size_t numel() const;
    std::vector<double> to_double() const;  // F32/F64/I64/I32/U8 converted; BF16 widened
};

class SafeTensors {
public:
    static SafeTensors load(const std::string& path);

    bool has(const std::string& name) const { return tensors_.count(name) != 0; }
    const TensorData& get(const std::string& name) const;  // throws naming the missing key
    std::vector<std::string> names() const;
    std::map<std::string, std::string>& metadata() { return metadata_; }
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    void add(const std::string& name, DType dtype, std::vector<int64_t> shape, const void* data);
    // Writes atomically: temp file in the same folder, fsync, rename.
    void save(const std::string& path) const;

private:
    std::string source_;
    std::map<std::string, TensorData> tensors_;
    std::map<std::string, std::string> metadata_;
};

}  // namespace rt
