// Synthetic generator (data/generator.h): determinism (per sample and per dataset across thread
// counts), labels checked against the pixels (gap, slider outline, letterbox padding), the size,
// strategy, angle and fake-gap statistics, the background split, the preview, the PNG writer
// (decoded here with an independent stored-block inflate) and the CLI's argument errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "data/generator.h"
#include "data/png.h"
#include "data/shard.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tools/commands.h"

namespace {

namespace fs = std::filesystem;
using data::GenConfig;
using data::GenSample;

constexpr double kDeg = 3.14159265358979323846 / 180.0;

std::string temp_dir(const std::string& name) {
    const fs::path p = fs::path(::testing::TempDir()) / ("sf_gen_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(p);
    return p.string();
}

std::vector<uint8_t> read_bytes(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

bool same_label(const data::Label& a, const data::Label& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

// Calls f(x, y, sd) for the original-frame pixels around a piece centred at (cx, cy), sd being
// the piece's signed distance at the pixel centre.
template <class F>
void for_piece_pixels(const GenSample& s, const data::PieceShape& p, double cx, double cy, F f) {
    const int r = static_cast<int>(data::piece_extent(p)) + 2;
    for (int y = std::max(0, static_cast<int>(cy) - r); y < std::min(s.orig_h, static_cast<int>(cy) + r); ++y)
        for (int x = std::max(0, static_cast<int>(cx) - r); x < std::min(s.orig_w, static_cast<int>(cx) + r); ++x)
            f(x, y, data::piece_sdf(p, static_cast<float>(x + 0.5 - cx), static_cast<float>(y + 0.5 - cy)));
}

TEST(DataGenerator, SameSeedAndIndexGiveIdenticalSamples) {
    GenConfig cfg;
    cfg.seed = 7;
    const GenSample a = data::generate_sample(cfg, 1234);
    data::generate_sample(cfg, 99999);  // another background in this thread's cache
    const GenSample b = data::generate_sample(cfg, 1234);
    GenSample c;
    std::thread([&] { c = data::generate_sample(cfg, 1234); }).join();  // a fresh thread, cold cache
    EXPECT_EQ(a.pixels, b.pixels);
    EXPECT_EQ(a.pixels, c.pixels);
    EXPECT_TRUE(same_label(a.label, b.label) && same_label(a.label, c.label));
    EXPECT_NE(a.pixels, data::generate_sample(cfg, 1235).pixels);
    cfg.seed = 8;
    EXPECT_NE(a.pixels, data::generate_sample(cfg, 1234).pixels);
}

TEST(DataGenerator, GrayIsLumaOfRgbAndLabelsAgree) {
    GenConfig g, c;
    c.channels = 3;
    for (uint64_t i : {3ull, 250ull, 777ull}) {
        const GenSample sg = data::generate_sample(g, i), sc = data::generate_sample(c, i);
        ASSERT_TRUE(same_label(sg.label, sc.label));
        int worst = 0;
        for (size_t p = 0; p < sg.pixels.size(); ++p) {
            const double luma = 0.299 * sc.pixels[p * 3] + 0.587 * sc.pixels[p * 3 + 1] + 0.114 * sc.pixels[p * 3 + 2];
            worst = std::max(worst, static_cast<int>(std::ceil(std::fabs(sg.pixels[p] - luma) - 0.5)));
        }
        EXPECT_LE(worst, 1) << "index " << i;  // both resize 8-bit images; rounding differs by at most 1
    }
}

TEST(DataGenerator, LetterboxMappingAndPadding) {
    for (const auto& [h, w] : {std::pair<int, int>{256, 512}, {128, 320}}) {
        GenConfig cfg;
        cfg.height = h;
        cfg.width = w;
        for (uint64_t i = 0; i < 120; i += 3) {
            const GenSample s = data::generate_sample(cfg, i * 37);
            const data::Label& l = s.label;
            const double scale = std::min(static_cast<double>(w) / s.orig_w, static_cast<double>(h) / s.orig_h);
            const int rw = static_cast<int>(std::nearbyint(s.orig_w * scale));
            const int rh = static_cast<int>(std::nearbyint(s.orig_h * scale));
            ASSERT_EQ(l.rect_x0, (w - rw) / 2);
            ASSERT_EQ(l.rect_y0, (h - rh) / 2);
            ASSERT_EQ(l.rect_x1, (w - rw) / 2 + rw);
            ASSERT_EQ(l.rect_y1, (h - rh) / 2 + rh);
            EXPECT_FLOAT_EQ(l.gap_x, static_cast<float>(scale * s.gap_x + l.rect_x0));
            EXPECT_FLOAT_EQ(l.gap_y, static_cast<float>(scale * s.gap_y + l.rect_y0));
            EXPECT_FLOAT_EQ(l.slider_x, static_cast<float>(scale * s.slider_x + l.rect_x0));
            EXPECT_FLOAT_EQ(l.slider_y, l.gap_y);
            for (int k = 0; k < l.num_fakes; ++k)
                EXPECT_FLOAT_EQ(l.fake_x[k], static_cast<float>(scale * s.fake_x[k] + l.rect_x0));
            EXPECT_NO_THROW(data::validate_label(l, h, w, "sample"));
            int pad_not_white = 0, inside_white = 0, inside = 0;
            for (int y = 0; y < h; ++y)
                for (int x = 0; x < w; ++x) {
                    const bool in = x >= l.rect_x0 && x < l.rect_x1 && y >= l.rect_y0 && y < l.rect_y1;
                    const uint8_t v = s.pixels[static_cast<size_t>(y) * w + x];
                    pad_not_white += !in && v != 255;
                    inside_white += in && v == 255;
                    inside += in;
                }
            EXPECT_EQ(pad_not_white, 0) << "index " << i * 37;
            EXPECT_LT(inside_white, inside / 2) << "index " << i * 37;
        }
    }
}

TEST(DataGenerator, GapAndSliderAreWhereTheLabelsSay) {
    GenConfig cfg;
    cfg.seed = 3;
    for (uint64_t i = 1000; i < 1400; i += 3) {
        data::GenDebug d;
        const GenSample s = data::generate_sample(cfg, i, &d);
        ASSERT_EQ(d.final.size(), static_cast<size_t>(s.orig_w) * s.orig_h * 3);
        auto px = [&](const std::vector<uint8_t>& im, int x, int y, int c) {
            return static_cast<int>(im[(static_cast<size_t>(y) * s.orig_w + x) * 3 + c]);
        };
        // Gap: the changed pixels are the piece at the label (IoU); 1 px off matches clearly worse.
        auto iou = [&](double dx, double dy) {
            int both = 0, either = 0;
            for_piece_pixels(s, s.piece, s.gap_x + dx, s.gap_y + dy, [&](int x, int y, float sd) {
                int diff = 0;
                for (int c = 0; c < 3; ++c) diff += std::abs(px(d.final, x, y, c) - px(d.clean, x, y, c));
                both += diff >= 3 && sd < 0;
                either += diff >= 3 || sd < 0;
            });
            return either ? static_cast<double>(both) / either : 0.0;
        };
        const double at = iou(0, 0);
        EXPECT_GT(at, 0.85) << "index " << i << " strategy " << data::strategy_name(s.strategy);
        for (const auto& [dx, dy] : {std::pair<int, int>{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) {
            EXPECT_GT(at, iou(dx, dy)) << "index " << i << " shift " << dx << "," << dy;
            EXPECT_GT(at, iou(2 * dx, 2 * dy) + 0.03) << "index " << i << " shift " << 2 * dx << "," << 2 * dy;
        }

        // Slider: the gap's clean content shifted by an exact number of pixels along x...
        const double shift = s.gap_x - s.slider_x;
        ASSERT_NEAR(shift, std::round(shift), 1e-3);
        const int sh = static_cast<int>(std::lround(shift));
        data::PieceShape sp = s.piece;
        sp.angle_rad = 0;
        if (s.strategy != data::kStrategyPerlin && s.strategy != data::kStrategyCombined) {
            int n = 0, bad = 0;
            for_piece_pixels(s, sp, s.slider_x, s.slider_y, [&](int x, int y, float sd) {
                if (sd >= -7) return;  // beyond the edge highlight
                ++n;
                for (int c = 0; c < 3; ++c) bad += px(d.final, x, y, c) != px(d.clean, x + sh, y, c);
            });
            EXPECT_EQ(bad, 0) << "index " << i;
            EXPECT_TRUE(n > 50 || sp.hollow > 0) << "index " << i;
        }
        // ...with a bright outline just inside its edge on all four sides of the label.
        double up[4] = {0, 0, 0, 0}, room[4] = {0, 0, 0, 0};
        for_piece_pixels(s, sp, s.slider_x, s.slider_y, [&](int x, int y, float sd) {
            if (sd < -2 || sd >= -0.5f) return;
            const int q = (x + 0.5 > s.slider_x) + 2 * (y + 0.5 > s.slider_y);
            for (int c = 0; c < 3; ++c) {
                up[q] += px(d.final, x, y, c) - px(d.clean, x + sh, y, c);
                room[q] += 255 - px(d.clean, x + sh, y, c);
            }
        });
        for (int q = 0; q < 4; ++q)
            EXPECT_GT(up[q] / std::max(room[q], 1.0), room[q] > 0 ? 0.25 : -1.0) << "index " << i << " quadrant " << q;
    }
}

TEST(DataGenerator, SizeMixPieceSizesAnglesAndFakes) {
    GenConfig cfg;
    cfg.seed = 11;
    int common = 0, n = 0;
    float piece_min = 1e9f, piece_max = 0;
    std::map<int, int> per_strategy;
    for (uint64_t i = 0; i < 1000; ++i, ++n) {
        const GenSample s = data::generate_sample(cfg, i * 13 + 5);  // 13 coprime to 100: all strategies
        const int w = s.orig_w, h = s.orig_h;
        common += (w == 320 && h == 160) || (w == 360 && h == 180) || (w == 400 && h == 200) || (w == 384 && h == 192);
        ASSERT_TRUE(w >= 280 && w <= 480 && h >= 140 && h <= 240) << w << "x" << h;
        ASSERT_TRUE(w >= 1.8 * h && w <= 2.4 * h) << w << "x" << h;
        piece_min = std::min(piece_min, s.piece.size);
        piece_max = std::max(piece_max, s.piece.size);
        ASSERT_TRUE(s.piece.size >= 46 && s.piece.size <= 64);
        ++per_strategy[s.strategy];
        const double deg = std::fabs(s.label.angle_rad) / kDeg;
        ASSERT_LE(deg, 1.8 + 1e-4);
        const bool rot = s.strategy == data::kStrategyRotation, combined = s.strategy == data::kStrategyCombined;
        const bool confusing = s.strategy == data::kStrategyConfusingGap;
        EXPECT_TRUE(!rot || (deg >= 0.5 - 1e-4 && deg <= 1.5 + 1e-4)) << deg;
        EXPECT_TRUE(rot || combined || s.label.angle_rad == 0.0f) << data::strategy_name(s.strategy);
        EXPECT_TRUE(!combined || deg == 0 || deg >= 0.5 - 1e-4) << deg;
        EXPECT_TRUE(!confusing || (s.label.num_fakes >= 1 && s.label.num_fakes <= 2)) << s.label.num_fakes;
        EXPECT_TRUE(confusing || combined || s.label.num_fakes == 0) << data::strategy_name(s.strategy);
        const float ge = data::piece_extent(s.piece);
        for (int k = 0; k < s.label.num_fakes; ++k) {
            const float fe = data::piece_extent(s.fake_piece[k]);
            EXPECT_TRUE(std::fabs(s.fake_x[k] - s.gap_x) >= fe + ge || std::fabs(s.fake_y[k] - s.gap_y) >= fe + ge)
                << "fake " << k << " overlaps the gap, index " << i * 13 + 5;
            const float se = s.piece.size / 2;
            EXPECT_TRUE(std::fabs(s.fake_x[k] - s.slider_x) >= fe + se ||
                        std::fabs(s.fake_y[k] - s.slider_y) >= fe + se);
            EXPECT_TRUE(s.fake_x[k] - fe >= 0 && s.fake_x[k] + fe <= w && s.fake_y[k] - fe >= 0 &&
                        s.fake_y[k] + fe <= h);
        }
        // The slider sits at the left, the gap to its right, both inside the image.
        EXPECT_TRUE(s.slider_x >= s.piece.size / 2 && s.slider_x <= 1.5 * s.piece.size);
        EXPECT_GE(s.gap_x - ge, s.slider_x + s.piece.size / 2);
        EXPECT_TRUE(s.gap_x + ge <= w && s.gap_y - ge >= 0 && s.gap_y + ge <= h);
    }
    EXPECT_NEAR(static_cast<double>(common) / n, 0.30, 0.05);
    EXPECT_LE(piece_min, 48);
    EXPECT_GE(piece_max, 62);
    const int expected[data::kStrategyCount] = {300, 100, 50, 100, 200, 50, 100, 100};
    for (int s = 0; s < data::kStrategyCount; ++s) EXPECT_EQ(per_strategy[s], expected[s]) << data::strategy_name(s);
}

TEST(DataGenerator, SplitByBackgroundIsExactAndStable) {
    int counts[3] = {0, 0, 0};
    std::map<int, int> val_slot;
    for (int b = 0; b < 10000; ++b) {
        const data::Split s = data::split_of_background(b);
        ASSERT_EQ(s, data::split_of_background(b));
        ++counts[static_cast<int>(s)];
        if (s == data::Split::Val) ++val_slot[b % 10];
    }
    EXPECT_EQ(counts[0], 8000);
    EXPECT_EQ(counts[1], 1000);
    EXPECT_EQ(counts[2], 1000);
    EXPECT_EQ(val_slot.size(), 10u);  // a permutation per block, not a fixed pattern
}

TEST(DataGenerator, DatasetIsIdenticalForAnyThreadCount) {
    GenConfig cfg;
    cfg.seed = 5;
    const uint64_t count = 930;  // 10 backgrounds (8 train, 1 val, 1 test), the last partial
    const std::string d1 = temp_dir("t1"), d2 = temp_dir("t2");
    uint64_t last_done = 0;
    const data::DatasetSummary s1 =
        data::generate_dataset(cfg, count, d1, 1, 96, [&](uint64_t done, uint64_t total, double) {
            EXPECT_EQ(total, count);
            EXPECT_GE(done, last_done);
            last_done = done;
        });
    EXPECT_EQ(last_done, count);
    data::generate_dataset(cfg, count, d2, 3, 96);
    EXPECT_EQ(s1.samples[0] + s1.samples[1] + s1.samples[2], count);
    for (const char* split : {"train", "val", "test"}) {
        const std::vector<std::string> f1 = data::list_shards(d1 + "/" + split),
                                       f2 = data::list_shards(d2 + "/" + split);
        ASSERT_EQ(f1.size(), f2.size()) << split;
        for (size_t k = 0; k < f1.size(); ++k) {
            EXPECT_EQ(fs::path(f1[k]).filename(), fs::path(f2[k]).filename());
            EXPECT_TRUE(read_bytes(f1[k]) == read_bytes(f2[k])) << f1[k] << " differs from " << f2[k];
        }
    }
    // The shards hold the samples of each split in index order.
    for (int sp = 0; sp < 3; ++sp) {
        std::vector<uint64_t> want;
        for (uint64_t i = 0; i < count; ++i)
            if (static_cast<int>(data::split_of_background(static_cast<int>(i / 100))) == sp) want.push_back(i);
        ASSERT_EQ(want.size(), s1.samples[sp]);
        size_t k = 0;
        std::vector<uint8_t> px(static_cast<size_t>(cfg.height) * cfg.width);
        for (const std::string& f : data::list_shards(d1 + "/" + data::split_name(static_cast<data::Split>(sp)))) {
            data::ShardReader r(f);
            EXPECT_LE(r.count(), 96u);
            for (size_t j = 0; j < r.count(); ++j, ++k) {
                const data::Label l = r.read(j, px.data());
                if (k % 37 != 0) continue;  // spot-check the bytes
                const GenSample s = data::generate_sample(cfg, want[k]);
                EXPECT_TRUE(same_label(l, s.label)) << f << " record " << j;
                EXPECT_TRUE(px == s.pixels) << f << " record " << j;
            }
        }
        EXPECT_EQ(k, want.size());
    }
    EXPECT_THROW(data::generate_dataset(cfg, 10, d1, 1, 96), rt::Error);  // refuses existing shards
    fs::remove_all(d1);
    fs::remove_all(d2);
}

TEST(DataGenerator, AnErrorStopsTheRunAndLeavesNoTemporaryFiles) {
    const std::string d = temp_dir("stop");
    GenConfig cfg;
    EXPECT_THROW(data::generate_dataset(cfg, 930, d, 2, 64,
                                        [](uint64_t, uint64_t, double) { SF_FAIL("stop requested by the test"); }),
                 rt::Error);
    for (const auto& e : fs::recursive_directory_iterator(d)) EXPECT_NE(e.path().extension(), ".tmp") << e.path();
    fs::remove_all(d);
}

TEST(DataGenerator, PreviewDrawsTheLabels) {
    GenConfig cfg;
    std::vector<GenSample> v;
    for (int i = 0; i < 5; ++i) v.push_back(data::generate_sample(cfg, data::preview_index(i)));
    int w = 0, h = 0;
    const std::vector<uint8_t> rgb = data::render_preview(v, cfg, 4, &w, &h);
    ASSERT_EQ(w, 4 * 512 + 3 * 4);
    ASSERT_EQ(h, 2 * 256 + 4);
    ASSERT_EQ(rgb.size(), static_cast<size_t>(w) * h * 3);
    for (int n = 0; n < 5; ++n) {
        const int ox = (n % 4) * 516, oy = (n / 4) * 260;
        auto px = [&](float x, float y) {
            return &rgb[(static_cast<size_t>(oy + static_cast<int>(y)) * w + ox + static_cast<int>(x)) * 3];
        };
        const uint8_t* g = px(v[n].label.gap_x, v[n].label.gap_y);
        EXPECT_TRUE(g[0] == 255 && g[1] == 32 && g[2] == 32) << "gap cross, tile " << n;
        const uint8_t* s = px(v[n].label.slider_x, v[n].label.slider_y);
        EXPECT_TRUE(s[0] == 40 && s[1] == 120 && s[2] == 255) << "slider cross, tile " << n;
    }
}

// ---- PNG: parsed and inflated here, independently of the writer ----

uint32_t be32(const std::vector<uint8_t>& b, size_t o) {
    return (static_cast<uint32_t>(b[o]) << 24) | (b[o + 1] << 16) | (b[o + 2] << 8) | b[o + 3];
}
// Returns the pixels of a PNG made of stored deflate blocks, checking every structure on the way.
std::vector<uint8_t> decode_stored_png(const std::vector<uint8_t>& b, int* w, int* h, int* channels) {
    static const uint8_t kSig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    EXPECT_TRUE(b.size() > 8 && std::equal(kSig, kSig + 8, b.begin()));
    std::vector<uint8_t> z;
    std::vector<std::string> types;
    for (size_t o = 8; o + 12 <= b.size();) {
        const uint32_t len = be32(b, o);
        const std::string type(b.begin() + static_cast<long>(o) + 4, b.begin() + static_cast<long>(o) + 8);
        EXPECT_EQ(be32(b, o + 8 + len), sftest::crc32_bitwise(&b[o + 4], len + 4)) << "CRC of " << type;
        types.push_back(type);
        if (type == "IHDR") {
            EXPECT_EQ(len, 13u);
            *w = static_cast<int>(be32(b, o + 8));
            *h = static_cast<int>(be32(b, o + 12));
            EXPECT_EQ(b[o + 16], 8);  // bit depth
            *channels = b[o + 17] == 2 ? 3 : b[o + 17] == 0 ? 1 : -1;
            EXPECT_TRUE(b[o + 18] == 0 && b[o + 19] == 0 && b[o + 20] == 0);
        } else if (type == "IDAT") {
            z.insert(z.end(), b.begin() + static_cast<long>(o) + 8, b.begin() + static_cast<long>(o + 8 + len));
        }
        o += 12 + len;
    }
    EXPECT_EQ(types.front(), "IHDR");
    EXPECT_EQ(types.back(), "IEND");
    EXPECT_TRUE(z.size() >= 6 && (z[0] & 0x0F) == 8 && ((z[0] << 8) | z[1]) % 31 == 0);
    std::vector<uint8_t> raw;
    size_t o = 2;
    for (bool last = false; !last && o + 5 <= z.size();) {
        last = z[o] & 1;
        EXPECT_EQ((z[o] >> 1) & 3, 0) << "not a stored block";
        const unsigned len = z[o + 1] | (z[o + 2] << 8), nlen = z[o + 3] | (z[o + 4] << 8);
        EXPECT_EQ(len ^ 0xFFFFu, nlen);
        raw.insert(raw.end(), z.begin() + static_cast<long>(o) + 5, z.begin() + static_cast<long>(o + 5 + len));
        o += 5 + len;
    }
    uint32_t a = 1, s = 0;
    for (uint8_t v : raw) a = (a + v) % 65521, s = (s + a) % 65521;
    EXPECT_EQ(o + 4, z.size());
    EXPECT_EQ(be32(z, o), (s << 16) | a) << "Adler-32";
    const size_t row = static_cast<size_t>(*w) * *channels;
    std::vector<uint8_t> px;
    EXPECT_EQ(raw.size(), (row + 1) * *h);
    for (int y = 0; y < *h && (y + 1) * (row + 1) <= raw.size(); ++y) {
        EXPECT_EQ(raw[y * (row + 1)], 0) << "filter byte, row " << y;
        px.insert(px.end(), raw.begin() + static_cast<long>(y * (row + 1) + 1),
                  raw.begin() + static_cast<long>((y + 1) * (row + 1)));
    }
    return px;
}

TEST(DataGenerator, PngWriterRoundTrips) {
    for (const auto& [w, h, c] : {std::tuple<int, int, int>{7, 3, 1}, {5, 4, 3}, {300, 200, 3}, {1, 1, 1}}) {
        std::vector<uint8_t> px(static_cast<size_t>(w) * h * c);
        for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 31 + i / 7);
        int dw = 0, dh = 0, dc = 0;
        EXPECT_EQ(decode_stored_png(data::encode_png(px.data(), w, h, c), &dw, &dh, &dc), px)
            << w << "x" << h << "x" << c;
        EXPECT_EQ(dw, w);
        EXPECT_EQ(dh, h);
        EXPECT_EQ(dc, c);
    }
    const std::string path = temp_dir("png") + ".png";
    const uint8_t one[3] = {1, 2, 3};
    data::write_png(path, one, 1, 1, 3);
    EXPECT_EQ(read_bytes(path), data::encode_png(one, 1, 1, 3));
    fs::remove(path);
    EXPECT_THROW(data::encode_png(one, 1, 1, 2), rt::Error);
    EXPECT_THROW(data::write_png("/nonexistent-dir/x.png", one, 1, 1, 3), rt::Error);
}

TEST(DataGenerator, BadConfigsAndArgumentsAreErrors) {
    GenConfig cfg;
    cfg.channels = 2;
    EXPECT_THROW(data::generate_sample(cfg, 0), rt::Error);
    cfg.channels = 1;
    cfg.width = 32;
    EXPECT_THROW(data::generate_sample(cfg, 0), rt::Error);
    using V = std::vector<std::string>;
    for (const V& args :
         {V{}, V{"--out", "x"}, V{"--count", "5"}, V{"--out", "x", "--count", "abc"}, V{"--out", "x", "--count", "-5"},
          V{"--out", "x", "--count", "0"}, V{"--out", "x", "--count", "5", "--channels", "2"},
          V{"--out", "x", "--count", "5", "--bogus", "1"}, V{"--out", "x", "--count", "5", "--threads"}, V{"stray"}})
        EXPECT_THROW(tools::cmd_generate(args), rt::Error) << ::testing::PrintToString(args);
}

TEST(DataGenerator, CommandWritesDatasetAndPreview) {
    const std::string d = temp_dir("cli");
    const std::string png = d + "_preview.png";
    ASSERT_EQ(tools::cmd_generate({"--out", d, "--count", "120", "--seed", "9", "--threads", "2", "--shard-size", "50",
                                   "--channels", "3", "--preview", png, "--preview-count", "2"}),
              0);
    size_t total = 0;
    for (const char* split : {"train", "val", "test"})
        if (fs::exists(d + "/" + split))
            for (const std::string& f : data::list_shards(d + "/" + split)) {
                data::ShardReader r(f);
                EXPECT_EQ(r.spec().channels, 3);
                total += r.count();
            }
    EXPECT_EQ(total, 120u);
    int w = 0, h = 0, c = 0;
    EXPECT_EQ(decode_stored_png(read_bytes(png), &w, &h, &c).size(), static_cast<size_t>(2 * 512 + 4) * 256 * 3);
    fs::remove_all(d);
    fs::remove(png);
}

}  // namespace
