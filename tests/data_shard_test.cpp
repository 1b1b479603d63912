// Compact shards (docs/FORMAT.md) and CRC32: round trips (gray, RGB, 4-bit), the byte layout, and
// every documented error: truncation, magic, version, header CRC, record CRC, bad labels, empty
// and missing directories.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "data/crc32.h"
#include "data/shard.h"
#include "runtime/error.h"
#include "tests/support/compare.h"

namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = static_cast<uint8_t>(rng());
    return v;
}

std::vector<uint8_t> read_file(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& p, const std::vector<uint8_t>& b) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

uint32_t get32(const std::vector<uint8_t>& b, size_t off) {
    return b[off] | (b[off + 1] << 8) | (b[off + 2] << 16) | (static_cast<uint32_t>(b[off + 3]) << 24);
}
uint64_t get64(const std::vector<uint8_t>& b, size_t off) {
    return get32(b, off) | (static_cast<uint64_t>(get32(b, off + 4)) << 32);
}
void put32(std::vector<uint8_t>& b, size_t off, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}
void fix_header_crc(std::vector<uint8_t>& b) { put32(b, 124, sftest::crc32_bitwise(b.data(), 124)); }

data::Label make_label(int i, int h, int w) {
    data::Label l;
    l.gap_x = 0.6f * w + 0.37f * i;
    l.gap_y = 0.5f * h - 0.25f * i;
    l.slider_x = 0.1f * w + 0.125f;
    l.slider_y = l.gap_y + 0.0625f;
    l.angle_rad = 0.01f * i - 0.02f;
    l.num_fakes = i % 3;
    for (int k = 0; k < l.num_fakes; ++k) l.fake_x[k] = 0.3f * w + k, l.fake_y[k] = 0.4f * h + k;
    l.rect_x0 = 2, l.rect_y0 = static_cast<float>(i % 4), l.rect_x1 = static_cast<float>(w - 2);
    l.rect_y1 = static_cast<float>(h);
    return l;
}

void expect_same_label(const data::Label& a, const data::Label& b) {
    EXPECT_EQ(0, std::memcmp(&a, &b, sizeof(a))) << "labels differ";
}

class ShardTest : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() / ("sf_shard_test_" + std::to_string(::getpid()) + "_" +
                                            ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    std::string path(const std::string& name) const { return (dir_ / name).string(); }

    // Writes n random samples; returns pixels (as written) and labels.
    std::string write(const std::string& name, const data::ShardSpec& s, int n, std::vector<uint8_t>* px,
                      std::vector<data::Label>* labels) {
        const size_t pb = static_cast<size_t>(s.height) * s.width * s.channels;
        *px = random_bytes(pb * n, 7 + n);
        labels->clear();
        data::ShardWriter w(path(name), s);
        for (int i = 0; i < n; ++i) {
            labels->push_back(make_label(i, s.height, s.width));
            w.add(px->data() + pb * i, labels->back());
        }
        EXPECT_EQ(w.count(), static_cast<size_t>(n));
        w.finish();
        return path(name);
    }
    fs::path dir_;
};

TEST(Crc32, KnownVectors) {
    const char* s = "123456789";
    EXPECT_EQ(data::crc32(s, 9), 0xCBF43926u);
    EXPECT_EQ(data::crc32("", 0), 0u);
    EXPECT_EQ(data::crc32("a", 1), 0xE8B7BE43u);
    const char* fox = "The quick brown fox jumps over the lazy dog";
    EXPECT_EQ(data::crc32(fox, std::strlen(fox)), 0x414FA339u);
    EXPECT_EQ(data::crc32(s + 4, 5, data::crc32(s, 4)), 0xCBF43926u) << "continuation";
}

TEST(Crc32, MatchesBitwiseReferenceAtEveryLengthAndSplit) {
    const std::vector<uint8_t> b = random_bytes(4099, 1);
    for (size_t n : {0, 1, 7, 15, 16, 17, 31, 32, 33, 100, 1000, 4099})
        EXPECT_EQ(data::crc32(b.data(), n), sftest::crc32_bitwise(b.data(), n)) << "n " << n;
    for (size_t cut = 0; cut <= 64; ++cut)
        EXPECT_EQ(data::crc32(b.data() + cut, b.size() - cut, data::crc32(b.data(), cut)),
                  sftest::crc32_bitwise(b.data(), b.size()))
            << "cut " << cut;
}

TEST_F(ShardTest, RoundTripGrayFullSize) {
    const data::ShardSpec s;  // 256x512 gray
    std::vector<uint8_t> px;
    std::vector<data::Label> labels;
    const std::string p = write("g.sfshard", s, 5, &px, &labels);
    EXPECT_FALSE(fs::exists(p + ".tmp"));
    data::ShardReader r(p);
    EXPECT_EQ(r.count(), 5u);
    EXPECT_TRUE(r.spec() == s);
    EXPECT_EQ(r.pixel_bytes(), 256u * 512u);
    EXPECT_EQ(r.path(), p);
    std::vector<uint8_t> out(r.pixel_bytes());
    for (size_t i = 0; i < 5; ++i) {
        expect_same_label(r.read(i, out.data()), labels[i]);
        EXPECT_EQ(0, std::memcmp(out.data(), px.data() + i * out.size(), out.size())) << "record " << i;
    }
    SF_EXPECT_ERROR(r.read(5, out.data()), "record 5 out of range");
    // Moving keeps the mapping.
    data::ShardReader moved(std::move(r));
    expect_same_label(moved.read(4, out.data()), labels[4]);
}

TEST_F(ShardTest, RoundTripRgb) {
    data::ShardSpec s;
    s.height = 32, s.width = 64, s.channels = 3;
    std::vector<uint8_t> px;
    std::vector<data::Label> labels;
    const std::string p = write("rgb.sfshard", s, 7, &px, &labels);
    data::ShardReader r(p);
    ASSERT_EQ(r.count(), 7u);
    EXPECT_EQ(r.pixel_bytes(), 32u * 64u * 3u);
    std::vector<uint8_t> out(r.pixel_bytes());
    for (size_t i = 0; i < 7; ++i) {
        expect_same_label(r.read(i, out.data()), labels[i]);
        EXPECT_EQ(0, std::memcmp(out.data(), px.data() + i * out.size(), out.size())) << "record " << i;
    }
}

TEST_F(ShardTest, Quant4KeepsTheHighNibbleAtHalfTheSize) {
    for (int channels : {1, 3}) {
        data::ShardSpec s;
        s.height = 16, s.width = 40, s.channels = channels, s.quant4 = true;
        std::vector<uint8_t> px;
        std::vector<data::Label> labels;
        const std::string p = write("q" + std::to_string(channels) + ".sfshard", s, 3, &px, &labels);
        const size_t pb = 16 * 40 * channels;
        // Documented size: 4096 + count*pb/2, aligned to 64, + count*72 + count*4.
        const size_t labels_off = (4096 + 3 * pb / 2 + 63) / 64 * 64;
        EXPECT_EQ(fs::file_size(p), labels_off + 3 * 72 + 3 * 4);
        data::ShardReader r(p);
        EXPECT_TRUE(r.spec().quant4);
        EXPECT_EQ(r.pixel_bytes(), pb);
        std::vector<uint8_t> out(pb);
        for (size_t i = 0; i < 3; ++i) {
            expect_same_label(r.read(i, out.data()), labels[i]);
            for (size_t k = 0; k < pb; ++k)
                ASSERT_EQ(out[k], px[i * pb + k] & 0xF0) << "record " << i << " value " << k;
        }
    }
}

TEST_F(ShardTest, HeaderAndSectionsAreLaidOutAsDocumented) {
    data::ShardSpec s;
    s.height = 8, s.width = 10, s.channels = 1;
    std::vector<uint8_t> px;
    std::vector<data::Label> labels;
    const auto b = read_file(write("l.sfshard", s, 2, &px, &labels));
    EXPECT_EQ(0, std::memcmp(b.data(), "SFSHARD\0", 8));
    EXPECT_EQ(get32(b, 8), 1u);      // version
    EXPECT_EQ(get32(b, 12), 128u);   // header bytes
    EXPECT_EQ(get64(b, 16), 2u);     // count
    EXPECT_EQ(get32(b, 24), 8u);     // height
    EXPECT_EQ(get32(b, 28), 10u);    // width
    EXPECT_EQ(get32(b, 32), 1u);     // channels
    EXPECT_EQ(get32(b, 36), 0u);     // flags
    EXPECT_EQ(get32(b, 40), 72u);    // label record bytes
    EXPECT_EQ(get32(b, 44), 80u);    // stored pixel bytes per record
    EXPECT_EQ(get64(b, 48), 4096u);  // pixels offset
    const uint64_t labels_off = (4096 + 2 * 80 + 63) / 64 * 64;
    EXPECT_EQ(get64(b, 56), labels_off);
    EXPECT_EQ(get64(b, 64), labels_off + 2 * 72);  // CRCs offset
    EXPECT_EQ(get64(b, 72), labels_off + 2 * 76);  // file bytes
    EXPECT_EQ(b.size(), labels_off + 2 * 76);
    EXPECT_EQ(get32(b, 124), sftest::crc32_bitwise(b.data(), 124));
    for (size_t k = 80; k < 124; ++k) EXPECT_EQ(b[k], 0) << "reserved byte " << k;
    // Record 1: pixels at 4096 + 80, label at labels_off + 72, CRC over both.
    EXPECT_EQ(0, std::memcmp(&b[4096 + 80], px.data() + 80, 80));
    float gx;
    std::memcpy(&gx, &b[labels_off + 72], 4);
    EXPECT_EQ(gx, labels[1].gap_x);
    EXPECT_EQ(get32(b, labels_off + 72 + 20), static_cast<uint32_t>(labels[1].num_fakes));
    std::vector<uint8_t> rec(&b[4096 + 80], &b[4096 + 160]);
    rec.insert(rec.end(), &b[labels_off + 72], &b[labels_off + 144]);
    EXPECT_EQ(get32(b, labels_off + 144 + 4), sftest::crc32_bitwise(rec.data(), rec.size()));
    // The label record encoding is the in-memory Label layout on a little-endian host.
    uint8_t enc[data::kLabelRecordBytes];
    data::encode_label(labels[1], enc);
    EXPECT_EQ(0, std::memcmp(enc, &labels[1], sizeof(enc)));
    expect_same_label(data::decode_label(enc), labels[1]);
}

TEST_F(ShardTest, EmptyShardIsValidButEmptyDirectoryIsAnError) {
    data::ShardWriter(path("e.sfshard"), data::ShardSpec()).finish();
    data::ShardReader r(path("e.sfshard"));
    EXPECT_EQ(r.count(), 0u);
    std::vector<uint8_t> out(r.pixel_bytes());
    SF_EXPECT_ERROR(r.read(0, out.data()), "out of range");
    fs::create_directories(dir_ / "none");
    SF_EXPECT_ERROR(data::list_shards((dir_ / "none").string()), "holds no *.sfshard files");
    SF_EXPECT_ERROR(data::list_shards((dir_ / "missing").string()), "no such directory", "missing");
}

TEST_F(ShardTest, ListShardsSortsAndSkipsOtherFiles) {
    for (const char* n : {"b.sfshard", "a.sfshard", "c.sfshard.tmp", "notes.txt"}) write_file(path(n), {1});
    fs::create_directories(dir_ / "d.sfshard");  // a folder is not a shard
    const auto got = data::list_shards(dir_.string());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0], path("a.sfshard"));
    EXPECT_EQ(got[1], path("b.sfshard"));
}

TEST_F(ShardTest, WriterWithoutFinishLeavesNothing) {
    {
        data::ShardWriter w(path("x.sfshard"), data::ShardSpec());
        std::vector<uint8_t> px(256 * 512, 9);
        w.add(px.data(), make_label(0, 256, 512));
        EXPECT_TRUE(fs::exists(path("x.sfshard.tmp")));
        EXPECT_FALSE(fs::exists(path("x.sfshard")));
    }
    EXPECT_FALSE(fs::exists(path("x.sfshard.tmp")));
    EXPECT_FALSE(fs::exists(path("x.sfshard")));
}

TEST_F(ShardTest, WriterRejectsBadSpecsAndLabels) {
    data::ShardSpec s;
    s.channels = 2;
    SF_EXPECT_ERROR(data::ShardWriter(path("s.sfshard"), s), "channels = 2");
    s.channels = 1, s.height = 3, s.width = 5, s.quant4 = true;
    SF_EXPECT_ERROR(data::ShardWriter(path("s.sfshard"), s), "quant4", "odd");
    EXPECT_FALSE(fs::exists(path("s.sfshard.tmp")));

    data::ShardWriter w(path("w.sfshard"), data::ShardSpec());
    std::vector<uint8_t> px(256 * 512);
    data::Label l = make_label(1, 256, 512);
    l.gap_x = std::numeric_limits<float>::quiet_NaN();
    SF_EXPECT_ERROR(w.add(px.data(), l), "w.sfshard: record 0", "gap_x", "not finite");
    l = make_label(1, 256, 512);
    l.angle_rad = std::numeric_limits<float>::infinity();
    SF_EXPECT_ERROR(w.add(px.data(), l), "angle_rad", "not finite");
    l = make_label(1, 256, 512);
    l.slider_x = 512.0f;
    SF_EXPECT_ERROR(w.add(px.data(), l), "slider_x = 512", "outside");
    l = make_label(1, 256, 512);
    l.gap_y = -0.5f;
    SF_EXPECT_ERROR(w.add(px.data(), l), "gap_y");
    l = make_label(2, 256, 512);
    l.fake_y[1] = 300;
    SF_EXPECT_ERROR(w.add(px.data(), l), "fake_y[1]", "outside");
    l = make_label(0, 256, 512);
    l.fake_y[1] = 300;  // unused slot (num_fakes 0): only finiteness matters
    EXPECT_NO_THROW(w.add(px.data(), l));
    l.num_fakes = 5;
    SF_EXPECT_ERROR(w.add(px.data(), l), "record 1", "num_fakes = 5");
    l = make_label(1, 256, 512);
    l.rect_x1 = l.rect_x0;
    SF_EXPECT_ERROR(w.add(px.data(), l), "rect_x0..rect_x1", "empty");
    l = make_label(1, 256, 512);
    l.rect_y1 = 257;
    SF_EXPECT_ERROR(w.add(px.data(), l), "rect_y0..rect_y1");
    EXPECT_EQ(w.count(), 1u);
}

class ShardCorruptionTest : public ShardTest {
protected:
    void SetUp() override {
        ShardTest::SetUp();
        spec_.height = 16, spec_.width = 32;
        good_ = read_file(write("good.sfshard", spec_, 6, &px_, &labels_));
    }
    // Writes `b` as bad.sfshard and returns its path.
    std::string bad(const std::vector<uint8_t>& b) {
        write_file(path("bad.sfshard"), b);
        return path("bad.sfshard");
    }
    data::ShardSpec spec_;
    std::vector<uint8_t> good_, px_;
    std::vector<data::Label> labels_;
};

TEST_F(ShardCorruptionTest, TruncatedFile) {
    auto b = good_;
    b.resize(100);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "truncated", "100 bytes");
    b = good_;
    b.pop_back();
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "truncated");
    b = good_;
    b.resize(5000);  // header intact, records cut
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "truncated");
    b = good_;
    b.push_back(0);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "trailing data");
    SF_EXPECT_ERROR(data::ShardReader{path("nothere.sfshard")}, "nothere.sfshard", "cannot open");
}

TEST_F(ShardCorruptionTest, WrongMagicVersionAndHeaderCrc) {
    auto b = good_;
    b[0] = 'X';
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "bad magic");
    b = good_;
    put32(b, 8, 2);
    fix_header_crc(b);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "unsupported shard version 2");
    b = good_;
    b[16] ^= 1;  // count, CRC left stale
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "bad.sfshard", "header CRC mismatch");
    b = good_;
    put32(b, 32, 2);  // channels 2 with a valid CRC
    fix_header_crc(b);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "channels 2");
    b = good_;
    put32(b, 36, 4);  // an unknown flag
    fix_header_crc(b);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "unknown header flags");
    b = good_;
    put32(b, 56, get32(b, 56) + 64);  // labels offset
    fix_header_crc(b);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "labels_offset");
    b = good_;
    put32(b, 16, 0xFFFFFFFFu);  // a huge count cannot overflow the size arithmetic
    put32(b, 20, 0xFFFFFFFFu);
    fix_header_crc(b);
    SF_EXPECT_ERROR(data::ShardReader{bad(b)}, "truncated");
}

TEST_F(ShardCorruptionTest, RecordCrcMismatchNamesTheRecord) {
    const size_t pb = 16 * 32;
    const uint64_t labels_off = get64(good_, 56);
    for (size_t off : {size_t(4096 + 3 * pb + 17), size_t(labels_off + 3 * 72 + 5)}) {
        auto b = good_;
        b[off] ^= 0x40;
        data::ShardReader r(bad(b));  // the header is fine
        std::vector<uint8_t> out(pb);
        SF_EXPECT_ERROR(r.read(3, out.data()), "bad.sfshard: record 3: CRC mismatch");
        for (size_t i : {0, 1, 2, 4, 5}) expect_same_label(r.read(i, out.data()), labels_[i]);
    }
}

TEST_F(ShardCorruptionTest, BadLabelWithValidCrcIsStillRejected) {
    auto b = good_;
    const size_t pb = 16 * 32;
    const uint64_t labels_off = get64(b, 56), crcs_off = get64(b, 64);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(&b[labels_off + 2 * 72 + 8], &nan, 4);  // record 2 slider_x
    std::vector<uint8_t> rec(&b[4096 + 2 * pb], &b[4096 + 3 * pb]);
    rec.insert(rec.end(), &b[labels_off + 2 * 72], &b[labels_off + 3 * 72]);
    put32(b, crcs_off + 8, sftest::crc32_bitwise(rec.data(), rec.size()));
    data::ShardReader r(bad(b));
    std::vector<uint8_t> out(pb);
    SF_EXPECT_ERROR(r.read(2, out.data()), "bad.sfshard: record 2", "slider_x", "not finite");
}

TEST_F(ShardCorruptionTest, InMemoryReaderMatchesTheFileReader) {
    data::ShardReader mem(good_.data(), good_.size(), "memory");
    EXPECT_EQ(mem.count(), 6u);
    std::vector<uint8_t> out(mem.pixel_bytes());
    expect_same_label(mem.read(5, out.data()), labels_[5]);
    EXPECT_EQ(0, std::memcmp(out.data(), px_.data() + 5 * out.size(), out.size()));
    SF_EXPECT_ERROR(data::ShardReader(good_.data(), 50, "memory"), "memory: truncated");
    SF_EXPECT_ERROR(data::ShardReader(nullptr, 0, "null"), "null: truncated");
}

}  // namespace
