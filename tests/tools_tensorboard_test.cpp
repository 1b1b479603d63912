// The TensorBoard writer (tools/tensorboard.h): CRC-32C known vectors, protobuf varints, the
// TFRecord framing byte by byte, the Event encoding, and a read-back of a written file by the
// `tensorboard` Python package (tests/tools/read_tfevents.py; skipped where it is not installed).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/compare.h"
#include "tools/run_log.h"
#include "tools/tensorboard.h"

namespace {

namespace tb = tools::tb;

std::string hex(const std::string& s) {
    std::string h;
    char b[4];
    for (unsigned char c : s) {
        std::snprintf(b, sizeof(b), "%02x", c);
        h += b;
    }
    return h;
}

uint32_t le32(const std::string& s, size_t at) {
    uint32_t v;
    std::memcpy(&v, s.data() + at, 4);
    return v;
}

TEST(TensorBoard, Crc32cKnownVectors) {
    // RFC 3720 (iSCSI) appendix B.4 and the common check value.
    EXPECT_EQ(tb::crc32c("123456789", 9), 0xE3069283u);
    const std::string zeros(32, '\0'), ones(32, '\xff');
    EXPECT_EQ(tb::crc32c(zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(tb::crc32c(ones.data(), 32), 0x62A8AB43u);
    std::string inc(32, '\0');
    for (int i = 0; i < 32; ++i) inc[static_cast<size_t>(i)] = static_cast<char>(i);
    EXPECT_EQ(tb::crc32c(inc.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(tb::crc32c("", 0), 0u);
}

TEST(TensorBoard, MaskedCrcRotatesAndAddsTheDelta) {
    const uint32_t c = tb::crc32c("123456789", 9);
    EXPECT_EQ(tb::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
    EXPECT_EQ(tb::masked_crc32c("", 0), 0xa282ead8u);
    EXPECT_EQ(tb::masked_crc32c("123456789", 9), 0xc78ab0e5u);  // tensorboard's masked_crc32c(b"123456789")
}

TEST(TensorBoard, Varints) {
    auto enc = [](uint64_t v) {
        std::string s;
        tb::put_varint(s, v);
        return hex(s);
    };
    EXPECT_EQ(enc(0), "00");
    EXPECT_EQ(enc(1), "01");
    EXPECT_EQ(enc(127), "7f");
    EXPECT_EQ(enc(128), "8001");
    EXPECT_EQ(enc(300), "ac02");  // the protobuf documentation's example
    EXPECT_EQ(enc(16384), "808001");
    EXPECT_EQ(enc(~0ull), "ffffffffffffffffff01");
}

TEST(TensorBoard, RecordFraming) {
    const std::string data = "abc";
    const std::string r = tb::tfrecord(data);
    ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
    EXPECT_EQ(hex(r.substr(0, 8)), "0300000000000000");  // uint64 length, little-endian
    EXPECT_EQ(le32(r, 8), tb::masked_crc32c(r.data(), 8));
    EXPECT_EQ(r.substr(12, 3), "abc");
    EXPECT_EQ(le32(r, 15), tb::masked_crc32c("abc", 3));
}

TEST(TensorBoard, EventEncoding) {
    // wall_time 1.5 (double 0x3ff8000000000000), file_version "brain.Event:2"; step 0 is omitted.
    EXPECT_EQ(hex(tb::file_version_event(1.5)),
              "09000000000000f83f"
              "1a0d" +
                  hex("brain.Event:2"));
    // step 300, one value {tag "a", simple_value 1.0f (0x3f800000)}.
    const std::string e = tb::scalars_event(1.5, 300, {{"a", 1.0}});
    // (The expected bytes are what tensorboard's event_pb2.Event(...).SerializeToString() gives.)
    EXPECT_EQ(hex(e),
              "09000000000000f83f"
              "10ac02"
              "2a0a"
              "0a08"
              "0a0161"
              "150000803f");
    // SessionLog{status START} (Event field 7) at step 5.
    EXPECT_EQ(hex(tb::session_start_event(1.5, 5)),
              "09000000000000f83f"
              "1005"
              "3a020801");
}

TEST(TensorBoard, ScalarsOfMetricsRecords) {
    const nlohmann::json t = {{"step", 20}, {"epoch", 1}, {"loss", 0.5}, {"lr", 3e-4}, {"flag", true}, {"name", "x"}};
    const tb::Scalars s = tools::tensorboard_scalars(t);
    ASSERT_EQ(s.size(), 3u);  // epoch, loss, lr (json objects iterate sorted by key)
    EXPECT_EQ(s[0].first, "train/epoch");
    EXPECT_EQ(s[1].first, "train/loss");
    EXPECT_EQ(s[1].second, 0.5);
    EXPECT_EQ(s[2].first, "train/lr");
    const nlohmann::json v = {{"validation", true}, {"step", 20}, {"hit_le_5px", 97.5}, {"best", true}};
    const tb::Scalars sv = tools::tensorboard_scalars(v);
    ASSERT_EQ(sv.size(), 1u);
    EXPECT_EQ(sv[0].first, "val/hit_le_5px");
}

TEST(TensorBoard, WriterFileStartsWithTheVersionEvent) {
    const std::string dir = testing::TempDir() + "sf_tb_writer";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::string path;
    {
        tools::TensorBoardWriter w(dir, 7);
        path = w.path();
        w.write(8, {{"train/loss", 0.25}});
    }
    EXPECT_EQ(std::filesystem::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Walk the records: file_version, session START at 7, scalars at 8.
    size_t at = 0;
    int records = 0;
    while (at < bytes.size()) {
        ASSERT_LE(at + 12, bytes.size());
        uint64_t len;
        std::memcpy(&len, bytes.data() + at, 8);
        ASSERT_EQ(le32(bytes, at + 8), tb::masked_crc32c(bytes.data() + at, 8));
        ASSERT_LE(at + 16 + len, bytes.size());
        EXPECT_EQ(le32(bytes, at + 12 + len), tb::masked_crc32c(bytes.data() + at + 12, len));
        const std::string data = bytes.substr(at + 12, len);
        if (records == 0) {
            EXPECT_NE(data.find("brain.Event:2"), std::string::npos);
        }
        if (records == 2) {
            EXPECT_NE(data.find("train/loss"), std::string::npos);
        }
        at += 16 + len;
        ++records;
    }
    EXPECT_EQ(records, 3);
    SF_EXPECT_ERROR(tools::TensorBoardWriter(dir + "/missing/folder"), "cannot write the TensorBoard file");
}

// The tensorboard package reads what the writer wrote. SF_TENSORBOARD_PYTHON names the
// interpreter (a venv with tensorboard); default python3. Skipped where it cannot import it.
TEST(TensorBoard, ReadBackByTheTensorboardPackage) {
    const char* env = std::getenv("SF_TENSORBOARD_PYTHON");
    const std::string py = env && *env ? env : "python3";
    if (std::system((py + " -c 'import tensorboard' >/dev/null 2>&1").c_str()) != 0)
        GTEST_SKIP() << py << " cannot import tensorboard (pip install tensorboard)";
    const std::string dir = testing::TempDir() + "sf_tb_readback";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    {
        tools::TensorBoardWriter w(dir);
        for (int step = 10; step <= 30; step += 10)
            w.write(step, tools::tensorboard_scalars({{"step", step}, {"loss", 1.0 / step}, {"lr", 3e-4}}));
        w.write(30, tools::tensorboard_scalars({{"validation", true}, {"step", 30}, {"hit_le_5px", 91.25}}));
    }
    const std::string out = dir + "/read.json";
    const std::string cmd = py + " " SF_SOURCE_DIR "/tests/tools/read_tfevents.py " + dir + " > " + out;
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(out);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["file_version"], "brain.Event:2");
    EXPECT_EQ(j["records"], 5);  // file_version + 3 training + 1 validation event
    ASSERT_EQ(j["scalars"]["train/loss"].size(), 3u) << j.dump();
    EXPECT_EQ(j["scalars"]["train/loss"][1][0], 20);
    EXPECT_FLOAT_EQ(j["scalars"]["train/loss"][1][1].get<float>(), 0.05f);
    EXPECT_FLOAT_EQ(j["scalars"]["train/lr"][2][1].get<float>(), 3e-4f);
    EXPECT_EQ(j["scalars"]["val/hit_le_5px"][0][0], 30);
    EXPECT_FLOAT_EQ(j["scalars"]["val/hit_le_5px"][0][1].get<float>(), 91.25f);
}

}  // namespace
