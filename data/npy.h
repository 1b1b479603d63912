// NumPy .npy files (format versions 1.0, 2.0, 3.0), read-only and memory-mapped: the layout the
// original Sider preprocessor writes with np.save (MODEL_SPEC §4.2).
//
//   "\x93NUMPY" | major u8 | minor u8 | header length (u16 LE for 1.0, u32 LE for 2.0/3.0)
//   | header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (64, 2),}
//     padded with spaces, ending in '\n' (latin-1 for 1.0/2.0, UTF-8 for 3.0) | raw data, C order
//
// The header is parsed strictly by a small Python-literal parser (strings, True/False, tuples of
// non-negative ints including () and (5,)); it must hold exactly the three keys. Supported dtypes:
// |b1 |u1 |i1 <i2 <u2 <i4 <u4 <i8 <u8 <f4 <f8 ('=' and, for one-byte types, '<' accepted too);
// big-endian, structured and other dtypes, fortran_order True, and a data size that differs from
// the shape's are rejected. Every message names the file and the problem.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/shard_io.h"

namespace data {

enum class NpyDType { Bool, UInt8, Int8, Int16, UInt16, Int32, UInt32, Int64, UInt64, Float32, Float64 };

const char* npy_dtype_name(NpyDType t);  // the canonical descr, e.g. "<f4"
size_t npy_dtype_size(NpyDType t);

// A parsed array: a view of data owned elsewhere (a mapping or the caller's buffer).
struct NpyArray {
    std::string name;  // the file (or buffer name) used in messages
    int major_version = 1, minor_version = 0;
    NpyDType dtype = NpyDType::Float32;
    std::string descr;              // as written in the header
    std::vector<int64_t> shape;     // () for a 0-d array
    const uint8_t* data = nullptr;  // C order, little-endian, not necessarily aligned
    size_t data_offset = 0;         // where the data starts in the file
    size_t numel = 1;
    size_t bytes = 0;  // numel * npy_dtype_size(dtype)

    std::string shape_str() const;  // "(64, 2, 256, 512)", "(5,)", "()"
    // Element i as float (Float32 only; unchecked, check the dtype once with expect()).
    float f32(size_t i) const { return load_f32le(data + 4 * i); }
    // Element i of any dtype, widened to double.
    double value(size_t i) const;
    // Throws naming the file unless the dtype is `t` and the shape matches `shape`, where -1 in
    // `shape` matches any extent.
    void expect(NpyDType t, const std::vector<int64_t>& shape) const;
};

// Parses an .npy image of `size` bytes at `buf`; the result points into `buf`. Throws rt::Error
// naming `name` on any problem. Never reads outside [buf, buf + size).
NpyArray parse_npy(const uint8_t* buf, size_t size, const std::string& name);

// A memory-mapped .npy file.
class NpyFile {
public:
    explicit NpyFile(const std::string& path);  // maps and parses; throws naming the file
    NpyFile(NpyFile&&) noexcept = default;
    NpyFile& operator=(NpyFile&&) noexcept = default;
    const NpyArray& array() const { return array_; }
    const std::string& path() const { return file_.path(); }

private:
    MappedFile file_;
    NpyArray array_;
};

}  // namespace data
