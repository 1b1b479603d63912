// Sider NPY import: a tiny dataset in the original's layout (MODEL_SPEC §4.2), written here byte
// by byte with known labels (sub-pixel offsets, fake gaps, angles, letterbox), converted to shards
// and read back; then each bad input and its error, with nothing left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/shard_manifest.h"
#include "data/sider_import.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tools/commands.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// np.save's version 1.0 layout for a little-endian array.
void write_npy(const fs::path& p, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
               size_t bytes) {
    std::string sh = "(";
    for (size_t i = 0; i < shape.size(); ++i) sh += (i ? ", " : "") + std::to_string(shape[i]);
    sh += shape.size() == 1 ? ",)" : ")";
    std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + sh + ", }";
    while ((10 + h.size() + 1) % 64) h.push_back(' ');
    h.push_back('\n');
    std::ofstream f(p, std::ios::binary);
    const uint8_t pre[10] = {
        0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<uint8_t>(h.size()), static_cast<uint8_t>(h.size() >> 8)};
    f.write(reinterpret_cast<const char*>(pre), 10);
    f.write(h.data(), static_cast<std::streamsize>(h.size()));
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// One batch file set as the original preprocessor writes it, plus what the import must recover.
struct Batch {
    int n = 0, c = 2, h = 64, w = 128;
    std::vector<float> image, heat, off;  // [n,c,h,w], [n,2,h/4,w/4], [n,4,h/4,w/4]
    json meta;
    std::vector<data::Label> truth;  // exact centres (before float32 offsets)
    std::vector<uint8_t> pixels;     // expected uint8 HWC per sample
    size_t gh() const { return h / 4; }
    size_t gw() const { return w / 4; }
};

Batch make_batch(int n, int c, uint32_t seed, int h = 64, int w = 128) {
    Batch b;
    b.n = n, b.c = c, b.h = h, b.w = w;
    const size_t hw = static_cast<size_t>(h) * w, cells = b.gh() * b.gw(), pc = c - 1;
    b.image.assign(n * c * hw, 0.f);
    b.heat.assign(n * 2 * cells, 0.f);
    b.off.assign(n * 4 * cells, 0.f);
    b.pixels.assign(n * hw * pc, 0);
    std::mt19937 rng(seed);
    auto uni = [&](double lo, double hi) { return lo + (hi - lo) * (rng() / 4294967296.0); };
    json tp = json::array(), grid = json::array(), offs = json::array(), fakes = json::array(), angles = json::array();
    for (int i = 0; i < n; ++i) {
        data::Label l;
        const int rw = w - 2 * static_cast<int>(uni(0, w / 8)), rh = h - 2 * static_cast<int>(uni(0, h / 8)) - i % 2;
        const int x0 = (w - rw) / 2, y0 = (h - rh) / 2;
        l.rect_x0 = x0, l.rect_y0 = y0, l.rect_x1 = x0 + rw, l.rect_y1 = y0 + rh;
        l.gap_x = uni(x0 + 8, x0 + rw - 8), l.gap_y = uni(y0 + 8, y0 + rh - 8);
        l.slider_x = uni(x0 + 4, x0 + 20), l.slider_y = l.gap_y + 0.3f;
        l.angle_rad = static_cast<float>(uni(-0.03, 0.03));
        l.num_fakes = i % 3;
        json cells_json = json::array();
        for (int k = 0; k < l.num_fakes; ++k) {
            const int cu = static_cast<int>(uni(0, b.gw())), cv = static_cast<int>(uni(0, b.gh()));
            cells_json.push_back({cu, cv});
            l.fake_x[k] = 4 * (cu + 0.5f), l.fake_y[k] = 4 * (cv + 0.5f);
        }
        json g, o;
        const double pts[2][2] = {{l.gap_x, l.gap_y}, {l.slider_x, l.slider_y}};
        for (int obj = 0; obj < 2; ++obj) {
            const int u = static_cast<int>(pts[obj][0] / 4), v = static_cast<int>(pts[obj][1] / 4);
            const double du = pts[obj][0] / 4 - u - 0.5, dv = pts[obj][1] / 4 - v - 0.5;
            float* hm = &b.heat[(i * 2 + obj) * cells];
            for (int yy = std::max(0, v - 4); yy < std::min<int>(b.gh(), v + 5); ++yy)
                for (int xx = std::max(0, u - 4); xx < std::min<int>(b.gw(), u + 5); ++xx)
                    hm[yy * b.gw() + xx] =
                        static_cast<float>(std::exp(-((yy - v) * (yy - v) + (xx - u) * (xx - u)) / 4.5));
            b.off[(i * 4 + 2 * obj) * cells + v * b.gw() + u] = static_cast<float>(du);
            b.off[(i * 4 + 2 * obj + 1) * cells + v * b.gw() + u] = static_cast<float>(dv);
            (obj ? g["slider"] : g["gap"]) = {u, v};
            (obj ? o["slider"] : o["gap"]) = {du, dv};
        }
        grid.push_back(g), offs.push_back(o), fakes.push_back(cells_json), angles.push_back(double(l.angle_rad));
        tp.push_back({{"scale", 1.0},
                      {"resized_size", {rw, rh}},
                      {"pad_left", x0},
                      {"pad_right", w - rw - x0},
                      {"pad_top", y0},
                      {"pad_bottom", h - rh - y0},
                      {"original_size", {rw, rh}},
                      {"target_size", {w, h}}});
        for (size_t y = 0; y < static_cast<size_t>(h); ++y)
            for (size_t x = 0; x < static_cast<size_t>(w); ++x) {
                const bool in = x >= size_t(x0) && x < size_t(x0 + rw) && y >= size_t(y0) && y < size_t(y0 + rh);
                for (size_t ch = 0; ch < pc; ++ch) {
                    const uint8_t k = in ? static_cast<uint8_t>(rng()) : 255;  // padding is white
                    b.pixels[(i * hw + y * w + x) * pc + ch] = k;
                    b.image[(i * c + ch) * hw + y * w + x] = static_cast<float>(k) / 255.0f;  // float32 / 255
                }
                b.image[(i * c + c - 1) * hw + y * w + x] = in ? 1.f : 0.f;
            }
        b.truth.push_back(l);
    }
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back("Pic" + std::to_string(seed) + "_" + std::to_string(i));
    b.meta = {{"batch_id", 0},       {"batch_size", n},      {"sample_ids", ids},       {"transform_params", tp},
              {"grid_coords", grid}, {"offsets_meta", offs}, {"confusing_gaps", fakes}, {"gap_angles", angles}};
    return b;
}

void write_batch(const fs::path& root, const std::string& split, int id, const Batch& b) {
    char stem[32];
    std::snprintf(stem, sizeof(stem), "%s_%04d", split.c_str(), id);
    const fs::path img = root / "images" / split, lab = root / "labels" / split;
    fs::create_directories(img), fs::create_directories(lab);
    const int64_t n = b.n, gh = b.gh(), gw = b.gw();
    write_npy(img / (std::string(stem) + ".npy"), "<f4", {n, b.c, b.h, b.w}, b.image.data(), b.image.size() * 4);
    write_npy(lab / (std::string(stem) + "_heatmaps.npy"), "<f4", {n, 2, gh, gw}, b.heat.data(), b.heat.size() * 4);
    write_npy(lab / (std::string(stem) + "_offsets.npy"), "<f4", {n, 4, gh, gw}, b.off.data(), b.off.size() * 4);
    json m = b.meta;
    m["batch_id"] = id;
    std::ofstream(lab / (std::string(stem) + "_meta.json")) << m.dump(2);
}

class ConvertTest : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("sf_convert_test_" + std::to_string(::getpid()) + "_" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        in_ = root_ / "processed";
        out_ = root_ / "out";
    }
    void TearDown() override { fs::remove_all(root_); }
    data::SiderConvertOptions opts(const std::string& split = "train", size_t shard_size = 4096) const {
        data::SiderConvertOptions o;
        o.in_dir = in_.string(), o.out_dir = out_.string(), o.split = split, o.shard_size = shard_size;
        return o;
    }
    // Reads every record of the split's shards in order.
    void read_all(const std::string& split, std::vector<std::vector<uint8_t>>* px, std::vector<data::Label>* labels) {
        for (const std::string& p : data::list_shards((out_ / split).string())) {
            data::ShardReader r(p);
            for (size_t i = 0; i < r.count(); ++i) {
                px->emplace_back(r.pixel_bytes());
                labels->push_back(r.read(i, px->back().data()));
            }
        }
    }
    void expect_matches(const std::vector<Batch>& batches, const std::string& split, bool quant4) {
        std::vector<std::vector<uint8_t>> px;
        std::vector<data::Label> got;
        read_all(split, &px, &got);
        size_t k = 0;
        for (const Batch& b : batches)
            for (int i = 0; i < b.n; ++i, ++k) {
                ASSERT_LT(k, got.size());
                const data::Label& t = b.truth[i];
                const data::Label& g = got[k];
                EXPECT_NEAR(g.gap_x, t.gap_x, 1e-4) << "sample " << k;
                EXPECT_NEAR(g.gap_y, t.gap_y, 1e-4) << "sample " << k;
                EXPECT_NEAR(g.slider_x, t.slider_x, 1e-4) << "sample " << k;
                EXPECT_NEAR(g.slider_y, t.slider_y, 1e-4) << "sample " << k;
                EXPECT_EQ(g.angle_rad, t.angle_rad) << "sample " << k;
                ASSERT_EQ(g.num_fakes, t.num_fakes) << "sample " << k;
                for (int f = 0; f < t.num_fakes; ++f) {
                    EXPECT_EQ(g.fake_x[f], t.fake_x[f]) << "sample " << k;
                    EXPECT_EQ(g.fake_y[f], t.fake_y[f]) << "sample " << k;
                }
                EXPECT_EQ(g.rect_x0, t.rect_x0) << "sample " << k;
                EXPECT_EQ(g.rect_y0, t.rect_y0) << "sample " << k;
                EXPECT_EQ(g.rect_x1, t.rect_x1) << "sample " << k;
                EXPECT_EQ(g.rect_y1, t.rect_y1) << "sample " << k;
                const size_t pb = px[k].size();
                ASSERT_EQ(pb, static_cast<size_t>(b.h) * b.w * (b.c - 1));
                for (size_t j = 0; j < pb; ++j) {
                    const uint8_t want = quant4 ? (b.pixels[i * pb + j] & 0xF0) : b.pixels[i * pb + j];
                    ASSERT_EQ(px[k][j], want) << "sample " << k << " byte " << j;
                }
            }
        EXPECT_EQ(k, got.size());
    }
    fs::path root_, in_, out_;
};

TEST_F(ConvertTest, GrayDatasetRoundTripsExactly) {
    const std::vector<Batch> b = {make_batch(3, 2, 1), make_batch(3, 2, 2)};
    write_batch(in_, "train", 0, b[0]);
    write_batch(in_, "train", 1, b[1]);
    auto o = opts("train", 4);
    std::vector<std::pair<size_t, size_t>> calls;
    o.progress = [&](size_t done, size_t total, const std::string& split) {
        calls.emplace_back(done, total);
        EXPECT_EQ(split, "train");
    };
    const auto res = data::convert_sider(o);
    ASSERT_EQ(res.size(), 1u);
    EXPECT_EQ(res[0].files, 2u);
    EXPECT_EQ(res[0].samples, 6u);
    ASSERT_EQ(res[0].shards.size(), 2u);  // 4 + 2
    EXPECT_EQ(res[0].shards[0], (out_ / "train" / "train_00000.sfshard").string());
    EXPECT_EQ(data::ShardReader(res[0].shards[1]).count(), 2u);
    EXPECT_EQ(data::ShardReader(res[0].shards[0]).spec().channels, 1);
    EXPECT_EQ(calls, (std::vector<std::pair<size_t, size_t>>{{1, 2}, {2, 2}}));
    expect_matches(b, "train", false);
}

TEST_F(ConvertTest, RgbAndQuant4FullSize) {
    const std::vector<Batch> b = {make_batch(2, 4, 3, 256, 512)};
    write_batch(in_, "val", 0, b[0]);
    auto o = opts("val");
    o.quant4 = true;
    const auto res = data::convert_sider(o);
    ASSERT_EQ(res.size(), 1u);
    const data::ShardReader r(res[0].shards.at(0));
    EXPECT_EQ(r.spec().channels, 3);
    EXPECT_TRUE(r.spec().quant4);
    EXPECT_EQ(r.spec().height, 256);
    expect_matches(b, "val", true);
}

TEST_F(ConvertTest, SplitAllConvertsTheSplitsThatHaveFiles) {
    const Batch a = make_batch(2, 2, 4), v = make_batch(1, 2, 5);
    write_batch(in_, "train", 0, a);
    write_batch(in_, "train", 1, a);
    write_batch(in_, "val", 7, v);
    fs::create_directories(in_ / "images" / "test");  // the original creates all split folders
    fs::create_directories(in_ / "labels" / "test");
    std::ofstream(in_ / "labels" / "train" / "train_index.json") << "{}";  // ignored
    const auto res = data::convert_sider(opts("all"));
    ASSERT_EQ(res.size(), 2u);
    EXPECT_EQ(res[0].split, "train");
    EXPECT_EQ(res[0].samples, 4u);
    EXPECT_EQ(res[1].split, "val");
    expect_matches({a, a}, "train", false);
    expect_matches({v}, "val", false);
    EXPECT_FALSE(fs::exists(out_ / "test"));
}

TEST_F(ConvertTest, CommandLine) {
    write_batch(in_, "test", 0, make_batch(3, 2, 6));
    EXPECT_EQ(
        tools::cmd_convert({"--in", in_.string(), "--out", out_.string(), "--split", "test", "--shard-size", "2"}), 0);
    EXPECT_EQ(data::list_shards((out_ / "test").string()).size(), 2u);
    // The manifest, written last, makes the dataset complete (docs/FORMAT.md "Dataset manifest").
    const data::DatasetManifest m = data::read_manifest(out_.string());
    EXPECT_EQ(m.source, "sider");
    EXPECT_EQ(m.samples("test"), 3u);
    data::verify_split(out_.string(), m, "test");
    EXPECT_EQ(tools::cmd_convert({"--help"}), 0);
    SF_EXPECT_ERROR(tools::cmd_convert({"--in", in_.string()}), "needs --in and --out");
    SF_EXPECT_ERROR(tools::cmd_convert({"--bogus"}), "unknown option '--bogus'");
    SF_EXPECT_ERROR(tools::cmd_convert({"--in", "a", "--out", "b", "--shard-size", "x"}), "--shard-size", "'x'");
    SF_EXPECT_ERROR(tools::cmd_convert({"--in", in_.string(), "--out", out_.string(), "--split", "dev"}),
                    "split 'dev'");
    SF_EXPECT_ERROR(tools::cmd_convert({"--in", in_.string(), "--out", out_.string(), "--split", "test"}),
                    "already holds shards");
    EXPECT_TRUE(data::has_manifest(out_.string()));  // a refused conversion leaves the dataset as it was
}

// ---- bad inputs: one clear error naming the file, nothing written ----

class ConvertErrorTest : public ConvertTest {
protected:
    void SetUp() override {
        ConvertTest::SetUp();
        good_ = make_batch(2, 2, 11);
    }
    // Converts expecting an error containing `parts`, then checks that nothing was left in out_.
    template <class... P>
    void expect_fails(const std::string& split, P... parts) {
        SF_EXPECT_ERROR(data::convert_sider(opts(split, 1)), parts...);
        EXPECT_FALSE(fs::exists(out_)) << "the failed run left " << out_;
    }
    fs::path lab(const std::string& name) const { return in_ / "labels" / "train" / name; }
    Batch good_;
};

TEST_F(ConvertErrorTest, MissingExtraAndUnmatchedFiles) {
    fs::create_directories(in_);
    expect_fails("all", "no data found");
    expect_fails("train", "images/train", "no such directory");
    write_batch(in_, "train", 0, good_);
    write_batch(in_, "train", 1, good_);
    fs::remove(lab("train_0001_offsets.npy"));
    expect_fails("train", "train_0001_offsets.npy", "missing");
    write_batch(in_, "train", 1, good_);
    std::ofstream(in_ / "images" / "train" / "readme.txt") << "x";
    expect_fails("train", "readme.txt", "unexpected entry");
    fs::remove(in_ / "images" / "train" / "readme.txt");
    fs::copy_file(lab("train_0001_meta.json"), lab("train_0002_meta.json"));
    expect_fails("train", "train_0002_meta.json", "no matching image");
    fs::remove(lab("train_0002_meta.json"));
    SF_EXPECT_ERROR(data::convert_sider(opts("val")), "val", "no such directory");
    fs::create_directories(in_ / "images" / "val"), fs::create_directories(in_ / "labels" / "val");
    expect_fails("val", "images/val", "holds no val_NNNN.npy files");
}

TEST_F(ConvertErrorTest, MismatchedShapesCountsAndDtypes) {
    write_batch(in_, "train", 0, good_);
    Batch b = make_batch(3, 2, 12);
    b.heat.resize(2 * 2 * b.gh() * b.gw());
    write_batch(in_, "train", 1, b);
    write_npy(lab("train_0001_heatmaps.npy"), "<f4", {2, 2, 16, 32}, b.heat.data(), b.heat.size() * 4);
    expect_fails("train", "train_0001_heatmaps.npy", "shape (2, 2, 16, 32), expected (3, 2, 16, 32)");
    write_batch(in_, "train", 1, b = make_batch(3, 2, 12));
    std::vector<double> d(b.off.begin(), b.off.end());
    write_npy(lab("train_0001_offsets.npy"), "<f8", {3, 4, 16, 32}, d.data(), d.size() * 8);
    expect_fails("train", "train_0001_offsets.npy", "dtype '<f8', expected '<f4'");
    write_batch(in_, "train", 1, b);
    const std::vector<float> three(3 * 3 * 64 * 128, 0.f);
    write_npy(in_ / "images" / "train" / "train_0001.npy", "<f4", {3, 3, 64, 128}, three.data(), three.size() * 4);
    expect_fails("train", "train_0001.npy", "3 channels");
    write_batch(in_, "train", 1, make_batch(2, 4, 12));  // RGB next to gray
    expect_fails("train", "train_0001.npy", "pixel channel");
}

TEST_F(ConvertErrorTest, MetaSchema) {
    write_batch(in_, "train", 0, good_);
    Batch b = good_;
    b.meta["gap_angles"] = {0.1};
    write_batch(in_, "train", 0, b);
    expect_fails("train", "train_0000_meta.json", "'gap_angles' has 1 entries", "2 samples");
    b = good_;
    b.meta.erase("confusing_gaps");
    write_batch(in_, "train", 0, b);
    expect_fails("train", "train_0000_meta.json", "lacks the key 'confusing_gaps'");
    b = good_;
    b.meta["confusing_gaps"][1] = {{1, 2}, {3, 4}, {5, 6}, {7, 8}, {9, 10}};
    write_batch(in_, "train", 0, b);
    expect_fails("train", "train_0000_meta.json", "5 confusing gaps, at most 4");
    b = good_;
    b.meta["confusing_gaps"][1] = {{1.5, 2}};
    write_batch(in_, "train", 0, b);
    expect_fails("train", "train_0000_meta.json", "confusing_gaps[1][0]", "pair of integers");
    b = good_;
    b.meta["batch_size"] = 64;
    write_batch(in_, "train", 0, b);
    expect_fails("train", "train_0000_meta.json", "batch_size 64");
    write_batch(in_, "train", 0, good_);
    std::ofstream(lab("train_0000_meta.json")) << "{\"gap_angles\": [0.1, ";
    expect_fails("train", "train_0000_meta.json", "not valid JSON");
}

// Errors found while decoding (pass 2): the shards already written by this run are removed.
TEST_F(ConvertErrorTest, SampleContentErrorsRollBack) {
    write_batch(in_, "train", 0, good_);
    Batch b = good_;
    std::fill(b.heat.begin() + 2 * b.gh() * b.gw(), b.heat.begin() + 3 * b.gh() * b.gw(), 0.f);  // sample 1 gap
    write_batch(in_, "train", 1, b);
    expect_fails("train", "train_0001_heatmaps.npy", "sample 1", "gap heatmap has 0 cells equal to 1.0");
    b = good_;
    b.image[5] = 0.5f;  // sample 0, channel 0, row 0
    write_batch(in_, "train", 1, b);
    expect_fails("train", "train_0001.npy", "sample 0", "not k/255");
    b = good_;
    b.image[(2 * 2 - 1) * 64 * 128 + 30 * 128 + 60] = 0.f;  // a hole in sample 1's mask
    write_batch(in_, "train", 1, b);
    expect_fails("train", "train_0001.npy", "sample 1", "not a rectangle");
    b = good_;
    b.meta["transform_params"][0]["pad_left"] = b.meta["transform_params"][0]["pad_left"].get<int>() + 1;
    write_batch(in_, "train", 1, b);
    expect_fails("train", "train_0001_meta.json", "sample 0", "transform_params");
    b = good_;
    b.meta["grid_coords"][1]["slider"][0] = b.meta["grid_coords"][1]["slider"][0].get<int>() + 1;
    write_batch(in_, "train", 1, b);
    expect_fails("train", "train_0001_meta.json", "sample 1", "grid_coords.slider");
    b = good_;
    b.meta["confusing_gaps"][0] = {{200, 3}};  // fake gap cell outside the 32-wide grid
    write_batch(in_, "train", 1, b);
    expect_fails("train", "train_0001_meta.json: sample 0", "fake_x[0]", "outside");
}

TEST_F(ConvertErrorTest, ExistingShardsAreNotOverwrittenAndPreexistingOutputStays) {
    write_batch(in_, "train", 0, good_);
    fs::create_directories(out_ / "train");
    std::ofstream(out_ / "train" / "old.sfshard") << "keep";
    SF_EXPECT_ERROR(data::convert_sider(opts("train")), "already holds shards", "old.sfshard");
    EXPECT_TRUE(fs::exists(out_ / "train" / "old.sfshard"));
    fs::remove(out_ / "train" / "old.sfshard");
    Batch b = good_;
    b.off[5] = 0.f;   // harmless
    b.heat[0] = 2.f;  // sample 0 gap heatmap out of range
    write_batch(in_, "train", 1, b);
    SF_EXPECT_ERROR(data::convert_sider(opts("train", 1)), "train_0001_heatmaps.npy", "outside [0, 1]");
    EXPECT_TRUE(fs::is_directory(out_ / "train")) << "folders that existed before the run stay";
    EXPECT_TRUE(fs::is_empty(out_ / "train"));
}

}  // namespace
