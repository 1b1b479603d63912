// NPY parser: files written here byte by byte (no numpy) in format versions 1.0, 2.0 and 3.0 with
// several dtypes and shapes, then every malformed variant and its message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/npy.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

// An .npy image as np.save writes it: magic, version, little-endian header length, the dict
// padded with spaces to a 64-byte boundary and ended by '\n', then the data.
std::vector<uint8_t> npy(int major, const std::string& dict, const std::vector<uint8_t>& data, bool pad = true) {
    const size_t len_bytes = major == 1 ? 2 : 4;
    std::string header = dict;
    if (pad)
        while ((6 + 2 + len_bytes + header.size() + 1) % 64) header.push_back(' ');
    header.push_back('\n');
    std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
    for (size_t i = 0; i < len_bytes; ++i) b.push_back(static_cast<uint8_t>(header.size() >> (8 * i)));
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    return b;
}

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
    return b;
}

data::NpyArray parse(const std::vector<uint8_t>& b) { return data::parse_npy(b.data(), b.size(), "t.npy"); }

std::string dict(const std::string& descr, const std::string& shape, const std::string& fortran = "False") {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
}

TEST(Npy, Version1Float32Matrix) {
    const std::vector<float> v = {0.f, 1.5f, -2.f, 3.25f, 1e-7f, 255.f};
    const auto a = parse(npy(1, dict("<f4", "(2, 3)"), bytes_of(v)));
    EXPECT_EQ(a.major_version, 1);
    EXPECT_EQ(a.dtype, data::NpyDType::Float32);
    EXPECT_EQ(a.descr, "<f4");
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a.shape_str(), "(2, 3)");
    EXPECT_EQ(a.numel, 6u);
    EXPECT_EQ(a.bytes, 24u);
    EXPECT_EQ(a.data_offset, 128u);  // np.save pads the preamble to a multiple of 64
    for (size_t i = 0; i < v.size(); ++i) {
        EXPECT_EQ(a.f32(i), v[i]);
        EXPECT_EQ(a.value(i), v[i]);
    }
    EXPECT_NO_THROW(a.expect(data::NpyDType::Float32, {2, -1}));
}

TEST(Npy, Version2And3AndEveryDtype) {
    const auto f8 = parse(npy(2, dict("<f8", "(5,)"), bytes_of(std::vector<double>{1, -2, 0.5, 1e300, -0.0})));
    EXPECT_EQ(f8.major_version, 2);
    EXPECT_EQ(f8.shape_str(), "(5,)");
    EXPECT_EQ(f8.value(3), 1e300);
    EXPECT_EQ(f8.data_offset, 128u);

    const auto u1 = parse(npy(3, dict("|u1", "()"), {200}));  // 0-d array: one element
    EXPECT_EQ(u1.major_version, 3);
    EXPECT_TRUE(u1.shape.empty());
    EXPECT_EQ(u1.shape_str(), "()");
    EXPECT_EQ(u1.numel, 1u);
    EXPECT_EQ(u1.value(0), 200);

    const auto i8 = parse(npy(1, dict("<i8", "(2, 1, 2)"), bytes_of(std::vector<int64_t>{-5, 7, 1LL << 40, 0})));
    EXPECT_EQ(i8.dtype, data::NpyDType::Int64);
    EXPECT_EQ(i8.value(0), -5);
    EXPECT_EQ(i8.value(2), static_cast<double>(1LL << 40));

    const auto i4 = parse(npy(2, dict("<i4", "(3,)"), bytes_of(std::vector<int32_t>{-1, 2, -3})));
    EXPECT_EQ(i4.dtype, data::NpyDType::Int32);
    EXPECT_EQ(i4.value(2), -3);

    const auto b1 = parse(npy(3, dict("|b1", "(4,)"), {1, 0, 0, 1}));
    EXPECT_EQ(b1.dtype, data::NpyDType::Bool);
    EXPECT_EQ(b1.value(3), 1);

    const auto i2 = parse(npy(1, dict("<i2", "(2,)"), bytes_of(std::vector<int16_t>{-300, 300})));
    EXPECT_EQ(i2.value(0), -300);
    const auto u2 = parse(npy(1, dict("<u2", "(1,)"), bytes_of(std::vector<uint16_t>{65535})));
    EXPECT_EQ(u2.value(0), 65535);
    const auto i1 = parse(npy(1, dict("|i1", "(1,)"), {0xFF}));
    EXPECT_EQ(i1.value(0), -1);
    const auto u4 = parse(npy(1, dict("<u4", "(1,)"), bytes_of(std::vector<uint32_t>{4000000000u})));
    EXPECT_EQ(u4.value(0), 4000000000.0);
    const auto u8 = parse(npy(1, dict("<u8", "(1,)"), bytes_of(std::vector<uint64_t>{1ull << 63})));
    EXPECT_EQ(u8.value(0), 9223372036854775808.0);
}

TEST(Npy, EmptyShapesAndHeaderSpellings) {
    EXPECT_EQ(parse(npy(1, dict("<f4", "(0,)"), {})).numel, 0u);
    EXPECT_EQ(parse(npy(1, dict("<f4", "(3, 0, 2)"), {})).numel, 0u);
    EXPECT_EQ(parse(npy(1, dict("<f4", "(4611686018427387904, 0)"), {})).numel, 0u);
    // Python accepts either quote style, any key order, no trailing comma, extra spaces.
    const std::vector<uint8_t> d = bytes_of(std::vector<float>{1, 2});
    EXPECT_EQ(parse(npy(1, "{\"shape\": (2,), \"descr\": \"<f4\", \"fortran_order\": False}", d)).numel, 2u);
    EXPECT_EQ(parse(npy(1, "{ 'descr' :'<f4','fortran_order':False,'shape':( 1 , 2 , ) }", d)).numel, 2u);
    EXPECT_EQ(parse(npy(1, dict("=f4", "(2,)"), d)).dtype, data::NpyDType::Float32);
    EXPECT_EQ(parse(npy(1, dict("<f4", "(2,)"), d, /*pad=*/false)).data_offset, 10u + dict("<f4", "(2,)").size() + 1);
}

TEST(Npy, MemoryMappedFile) {
    const std::string p =
        (std::filesystem::temp_directory_path() / ("sf_npy_test_" + std::to_string(::getpid()) + ".npy")).string();
    const std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
    const auto b = npy(1, dict("<f4", "(2, 2, 2)"), bytes_of(v));
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    {
        data::NpyFile f(p);
        EXPECT_EQ(f.path(), p);
        EXPECT_EQ(f.array().name, p);
        EXPECT_EQ(f.array().f32(7), 8.f);
        data::NpyFile moved(std::move(f));
        EXPECT_EQ(moved.array().f32(6), 7.f);
    }
    std::filesystem::remove(p);
    SF_EXPECT_ERROR(data::NpyFile{p}, p.c_str(), "cannot open");
}

TEST(Npy, MalformedFilesAreRejectedWithTheirReason) {
    const auto d6 = bytes_of(std::vector<float>(6, 1.f));
    const auto good = npy(1, dict("<f4", "(2, 3)"), d6);
    ASSERT_NO_THROW(parse(good));

    auto b = good;
    b[1] = 'X';
    SF_EXPECT_ERROR(parse(b), "t.npy", "bad magic");
    SF_EXPECT_ERROR(parse(std::vector<uint8_t>(good.begin(), good.begin() + 5)), "t.npy", "truncated");
    SF_EXPECT_ERROR(parse(std::vector<uint8_t>(good.begin(), good.begin() + 40)), "t.npy", "truncated NPY header");
    b = good;
    b[6] = 4;
    SF_EXPECT_ERROR(parse(b), "t.npy", "version 4.0");
    b = good;
    b[7] = 1;
    SF_EXPECT_ERROR(parse(b), "t.npy", "version 1.1");

    SF_EXPECT_ERROR(parse(npy(1, dict("<c8", "(2, 3)"), d6)), "t.npy", "unsupported dtype '<c8'");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f2", "(2, 3)"), d6)), "t.npy", "unsupported dtype '<f2'");
    SF_EXPECT_ERROR(parse(npy(1, dict("<U5", "(2, 3)"), d6)), "t.npy", "unsupported dtype '<U5'");
    SF_EXPECT_ERROR(parse(npy(1, dict(">f4", "(2, 3)"), d6)), "t.npy", "big-endian", "'>f4'");
    SF_EXPECT_ERROR(parse(npy(1, dict("|f4", "(2, 3)"), d6)), "t.npy", "'|f4'");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(2, 3)", "True"), d6)), "t.npy", "fortran_order True");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(2, 4)"), d6)), "t.npy", "data size mismatch", "(2, 4)");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(1, 3)"), d6)), "t.npy", "data size mismatch", "needs 12 bytes",
                    "has 24");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(4611686018427387904, 4611686018427387904)"), d6)), "t.npy",
                    "data size mismatch");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(99999999999999999999,)"), d6)), "t.npy", "integer too large");

    // Header syntax and schema.
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(6)"), d6)), "t.npy", "not a tuple");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(-6,)"), d6)), "t.npy", "non-negative integer");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(06,)"), d6)), "t.npy", "leading zero");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "[6]"), d6)), "t.npy", "list");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(2, 3)", "false"), d6)), "t.npy", "malformed NPY header");
    SF_EXPECT_ERROR(parse(npy(1, dict("<f4", "(2, 3)", "Truely"), d6)), "t.npy", "malformed NPY header");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}", d6)), "t.npy",
                    "structured dtype");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'shape': (2, 3)}", d6)), "t.npy", "lacks the key 'fortran_order'");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': True}", d6)), "t.npy",
                    "unexpected key 'x'");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}", d6)),
                    "t.npy", "repeats the key 'descr'");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} x", d6)), "t.npy",
                    "after the dict");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4' 'fortran_order': False, 'shape': (2, 3)}", d6)), "t.npy",
                    "expected ','");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)", d6)), "t.npy",
                    "malformed NPY header");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': 7, 'fortran_order': False, 'shape': (2, 3)}", d6)), "t.npy",
                    "malformed NPY header");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': 'a\\'b', 'fortran_order': False, 'shape': (2, 3)}", d6)), "t.npy",
                    "escape");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': True, 'fortran_order': False, 'shape': (2, 3)}", d6)), "t.npy",
                    "'descr' is not a string");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", d6)), "t.npy",
                    "malformed NPY header");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'fortran_order': (), 'shape': (2, 3)}", d6)), "t.npy",
                    "'fortran_order' is not True or False");
    SF_EXPECT_ERROR(parse(npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': '6'}", d6)), "t.npy",
                    "'shape' is not a tuple");
    b = good;
    b[127] = ' ';  // the header's final '\n'
    SF_EXPECT_ERROR(parse(b), "t.npy", "newline");
}

TEST(Npy, ExpectNamesFileDtypeAndShape) {
    const auto a = parse(npy(1, dict("<f8", "(2, 3)"), bytes_of(std::vector<double>(6))));
    SF_EXPECT_ERROR(a.expect(data::NpyDType::Float32, {2, 3}), "t.npy", "dtype '<f8', expected '<f4'");
    SF_EXPECT_ERROR(a.expect(data::NpyDType::Float64, {2, 4}), "t.npy", "shape (2, 3), expected (2, 4)");
    SF_EXPECT_ERROR(a.expect(data::NpyDType::Float64, {-1}), "t.npy", "expected (*,)");
    EXPECT_STREQ(data::npy_dtype_name(data::NpyDType::UInt8), "|u1");
    EXPECT_EQ(data::npy_dtype_size(data::NpyDType::Int64), 8u);
}

}  // namespace
