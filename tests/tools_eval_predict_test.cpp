// `slidefuse eval` and `slidefuse predict` on the CPU backend: the letterbox and its inverse on
// hand-computed cases and against the generator's own letterbox, image decoding (PNG from
// data/png.h, JPEG from stb_image_write) and its errors, eval's table/JSON/CSV (metrics recomputed
// here from the CSV rows), batch-size invariance, and the refusals (missing checkpoint, channel or
// size mismatch, empty split, no config).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/generator.h"
#include "data/png.h"
#include "data/shard.h"
#include "kernels/preprocess.h"
#include "model/checkpoint.h"
#include "model/init.h"
#include "model/net.h"
#include "runtime/error.h"
#include "tests/support/compare.h"
#include "tests/support/eval_fixture.h"
#include "tools/commands.h"
#include "tools/config.h"
#include "tools/eval_model.h"
#include "tools/image_io.h"
#include "tools/letterbox.h"

#define STB_IMAGE_WRITE_STATIC
#define STB_IMAGE_WRITE_IMPLEMENTATION
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb/stb_image_write.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kH = sftest::kEvalH, kW = sftest::kEvalW;  // small canvas: grid 16x32

std::string temp_dir(const std::string& name) {
    const fs::path p = fs::path(::testing::TempDir()) / ("sf_evalpred_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
    return p.string();
}

std::string read_text(const std::string& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// ---- letterbox geometry and pixels ----

struct GeoCase {
    int w, h;
    double scale;
    int rw, rh, pad_left, pad_top;
};

TEST(Letterbox, GeometryOnHandComputedCases) {
    const GeoCase cases[] = {
        {320, 160, 1.6, 512, 256, 0, 0},     // 2:1 upscale, no padding
        {400, 150, 1.28, 512, 192, 0, 32},   // wide: bands top and bottom
        {300, 200, 1.28, 384, 256, 64, 0},   // narrow: bands left and right
        {333, 250, 1.024, 341, 256, 85, 0},  // odd padding 171 -> floor(85.5) = 85
        {1024, 300, 0.5, 512, 150, 0, 53},   // larger than the canvas: downscale
        {1021, 512, 0.5, 510, 256, 1, 0},    // 510.5 rounds half to even (Python round)
        {512, 256, 1.0, 512, 256, 0, 0},     // identity
    };
    for (const GeoCase& c : cases) {
        const tools::Letterbox lb = tools::letterbox_geometry(c.w, c.h, 512, 256);
        SCOPED_TRACE(std::to_string(c.w) + "x" + std::to_string(c.h));
        EXPECT_DOUBLE_EQ(lb.scale, c.scale);
        EXPECT_EQ(lb.resized_w, c.rw);
        EXPECT_EQ(lb.resized_h, c.rh);
        EXPECT_EQ(lb.pad_left, c.pad_left);
        EXPECT_EQ(lb.pad_top, c.pad_top);
    }
    SF_EXPECT_ERROR(tools::letterbox_geometry(0, 10, 512, 256), "0x10");
    // An extreme aspect keeps one pixel row instead of none.
    EXPECT_EQ(tools::letterbox_geometry(100000, 1, 512, 256).resized_h, 1);
}

TEST(Letterbox, KnownCanvasPointsMapBackToTheOriginal) {
    struct Pt {
        int w, h;
        double cx, cy, x, y;  // canvas point and its original-image point, by hand
    };
    const Pt pts[] = {
        {320, 160, 160, 80, 100, 50},           // (160/1.6, 80/1.6)
        {400, 150, 256, 128, 200, 75},          // ((256-0)/1.28, (128-32)/1.28)
        {300, 200, 192, 100, 100, 78.125},      // ((192-64)/1.28, 100/1.28)
        {333, 250, 85, 0, 0, 0},                // the resized image's corner
        {333, 250, 85 + 102.4, 128, 100, 125},  // 1.024 * 100 + 85
        {1024, 300, 511, 53 + 75, 1022, 150},   // ((511-0)/0.5, (128-53)/0.5)
    };
    for (const Pt& p : pts) {
        const tools::Letterbox lb = tools::letterbox_geometry(p.w, p.h, 512, 256);
        double x, y, cx, cy;
        tools::to_original(lb, p.cx, p.cy, &x, &y);
        EXPECT_NEAR(x, p.x, 1e-9) << p.w << "x" << p.h;
        EXPECT_NEAR(y, p.y, 1e-9) << p.w << "x" << p.h;
        tools::to_canvas(lb, p.x, p.y, &cx, &cy);
        EXPECT_NEAR(cx, p.cx, 1e-9);
        EXPECT_NEAR(cy, p.cy, 1e-9);
    }
}

TEST(Letterbox, BilinearPixelsAndWhitePadding) {
    // 4x1 row [0,100,200,40] -> 8 wide (scale 2): s = (x+0.5)/2 - 0.5, clamped at the borders.
    const uint8_t src[4] = {0, 100, 200, 40};
    const tools::Letterbox lb = tools::letterbox_geometry(4, 1, 8, 4);
    ASSERT_EQ(lb.resized_w, 8);
    ASSERT_EQ(lb.resized_h, 2);
    ASSERT_EQ(lb.pad_top, 1);
    std::vector<uint8_t> canvas(8 * 4, 0);
    tools::letterbox_pixels(lb, src, 1, canvas.data());
    const uint8_t row[8] = {0, 25, 75, 125, 175, 160, 80, 40};
    for (int x = 0; x < 8; ++x) {
        EXPECT_EQ(canvas[static_cast<size_t>(x)], 255) << "top band x=" << x;
        EXPECT_EQ(canvas[static_cast<size_t>(8 + x)], row[x]) << "x=" << x;
        EXPECT_EQ(canvas[static_cast<size_t>(16 + x)], row[x]) << "x=" << x;
        EXPECT_EQ(canvas[static_cast<size_t>(24 + x)], 255) << "bottom band x=" << x;
    }
    const data::Label r = tools::valid_rect_label(lb);
    EXPECT_EQ(r.rect_x0, 0);
    EXPECT_EQ(r.rect_y0, 1);
    EXPECT_EQ(r.rect_x1, 8);
    EXPECT_EQ(r.rect_y1, 3);
}

// The generator's gray: round(0.299 R + 0.587 G + 0.114 B) in integers (data/generator.h).
std::vector<uint8_t> generator_gray(const std::vector<uint8_t>& rgb) {
    std::vector<uint8_t> g(rgb.size() / 3);
    for (size_t i = 0; i < g.size(); ++i)
        g[i] = static_cast<uint8_t>((299 * rgb[3 * i] + 587 * rgb[3 * i + 1] + 114 * rgb[3 * i + 2] + 500) / 1000);
    return g;
}

TEST(Letterbox, MatchesTheGeneratorsLetterboxOnItsOwnImages) {
    data::GenConfig g;
    g.seed = 5;
    g.height = kH;
    g.width = kW;
    for (uint64_t index : {0ull, 7ull, 31ull, 250ull}) {
        data::GenDebug dbg;
        const data::GenSample s = data::generate_sample(g, index, &dbg);
        const tools::Letterbox lb = tools::letterbox_geometry(s.orig_w, s.orig_h, kW, kH);
        EXPECT_EQ(lb.pad_left, s.pad_left);
        EXPECT_EQ(lb.pad_top, s.pad_top);
        const data::Label r = tools::valid_rect_label(lb);
        EXPECT_EQ(r.rect_x1, s.label.rect_x1);
        EXPECT_EQ(r.rect_y1, s.label.rect_y1);
        double cx, cy;
        tools::to_canvas(lb, s.gap_x, s.gap_y, &cx, &cy);
        EXPECT_NEAR(cx, s.label.gap_x, 1e-3);
        EXPECT_NEAR(cy, s.label.gap_y, 1e-3);
        // Same gray -> bit-identical canvas; OpenCV's gray weights differ by at most one level.
        std::vector<uint8_t> canvas(static_cast<size_t>(kW) * kH);
        tools::letterbox_pixels(lb, generator_gray(dbg.final).data(), 1, canvas.data());
        EXPECT_EQ(canvas, s.pixels) << "index " << index;
        tools::Image8 im{s.orig_w, s.orig_h, 3, dbg.final};
        tools::letterbox_pixels(lb, tools::to_model_pixels(im, 1).data(), 1, canvas.data());
        int worst = 0;
        for (size_t i = 0; i < canvas.size(); ++i) worst = std::max(worst, std::abs(canvas[i] - s.pixels[i]));
        EXPECT_LE(worst, 1) << "index " << index;
    }
}

// ---- image decoding ----

TEST(ImageIo, ModelPixelsFollowOpenCvGray) {
    const tools::Image8 rgb{3, 1, 3, {255, 0, 0, 0, 255, 0, 0, 0, 255}};
    EXPECT_EQ(tools::to_model_pixels(rgb, 1), (std::vector<uint8_t>{76, 150, 29}));  // cv2 BGR2GRAY values
    EXPECT_EQ(tools::to_model_pixels(rgb, 3), rgb.pixels);
    const tools::Image8 rgba{2, 1, 4, {10, 20, 30, 0, 200, 200, 200, 255}};  // alpha ignored, not composited
    EXPECT_EQ(tools::to_model_pixels(rgba, 1), (std::vector<uint8_t>{18, 200}));
    const tools::Image8 ga{2, 1, 2, {7, 0, 9, 128}};
    EXPECT_EQ(tools::to_model_pixels(ga, 1), (std::vector<uint8_t>{7, 9}));
    EXPECT_EQ(tools::to_model_pixels(ga, 3), (std::vector<uint8_t>{7, 7, 7, 9, 9, 9}));
    SF_EXPECT_ERROR(tools::to_model_pixels(rgb, 2), "1 (gray) or 3 (RGB)");
}

TEST(ImageIo, ReadsPngAndJpegAndNamesTheFileOnErrors) {
    const std::string dir = temp_dir("io");
    std::vector<uint8_t> rgb(37 * 23 * 3);
    for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7) % 251);
    data::write_png(dir + "/a.png", rgb.data(), 37, 23, 3);
    tools::Image8 im = tools::read_image(dir + "/a.png");
    EXPECT_EQ(im.width, 37);
    EXPECT_EQ(im.height, 23);
    EXPECT_EQ(im.channels, 3);
    EXPECT_EQ(im.pixels, rgb);

    // A smooth gray image as JPEG decodes to the same size, close to the original (lossy).
    std::vector<uint8_t> gray(64 * 40);
    for (int y = 0; y < 40; ++y)
        for (int x = 0; x < 64; ++x) gray[static_cast<size_t>(y * 64 + x)] = static_cast<uint8_t>(2 * x + y);
    ASSERT_NE(stbi_write_jpg((dir + "/b.jpg").c_str(), 64, 40, 1, gray.data(), 95), 0);
    im = tools::read_image(dir + "/b.jpg");
    EXPECT_EQ(im.width, 64);
    EXPECT_EQ(im.height, 40);
    EXPECT_EQ(im.channels, 3);  // stb_image_write stores every JPEG as YCbCr
    const std::vector<uint8_t> back = tools::to_model_pixels(im, 1);
    double err = 0;
    for (size_t i = 0; i < gray.size(); ++i) err += std::abs(back[i] - gray[i]);
    EXPECT_LT(err / static_cast<double>(gray.size()), 2.0);

    SF_EXPECT_ERROR(tools::read_image(dir + "/missing.png"), "missing.png", "no such file");
    SF_EXPECT_ERROR(tools::read_image(dir), "not a regular file");
    std::ofstream(dir + "/text.png") << "this is not an image\n";
    SF_EXPECT_ERROR(tools::read_image(dir + "/text.png"), "text.png", "not a PNG or JPEG image");
    std::ofstream(dir + "/empty.png").close();
    SF_EXPECT_ERROR(tools::read_image(dir + "/empty.png"), "empty.png", "empty file");
    // A PNG cut inside its image data: the header reads, the pixels do not.
    std::vector<uint8_t> png = data::encode_png(rgb.data(), 37, 23, 3);
    png.resize(png.size() / 2);
    std::ofstream(dir + "/cut.png", std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
    SF_EXPECT_ERROR(tools::read_image(dir + "/cut.png"), "cut.png", "cannot decode the image");
    fs::remove_all(dir);
}

// ---- eval and predict on a checkpoint of a freshly initialised network ----

// A run folder (config.resolved.yaml, checkpoints/ckpt-00000003.safetensors), a dataset root with
// val/ (7 generated samples) and test/ (an empty shard), built once for the suite.
class EvalPredict : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        files_ = new sftest::EvalFiles(sftest::write_eval_files(temp_dir("suite")));
        samples_ = files_->val;
    }
    static void TearDownTestSuite() {
        std::error_code ec;
        fs::remove_all(files_->root, ec);
        delete files_;
        files_ = nullptr;
    }
    static std::string ckpt() { return files_->ckpt(); }
    static const std::string& root() { return files_->root; }

    static sftest::EvalFiles* files_;
    static std::vector<data::GenSample> samples_;
};
sftest::EvalFiles* EvalPredict::files_ = nullptr;
std::vector<data::GenSample> EvalPredict::samples_;

TEST_F(EvalPredict, EvalWritesTableJsonAndCsvThatAgree) {
    const std::string out = root() + "/e3.json", csv = root() + "/e3.csv";
    ::testing::internal::CaptureStdout();
    ASSERT_EQ(tools::cmd_eval({"--checkpoint", ckpt(), "--csv", csv, "--out", out, "--batch-size", "3"}), 0);
    const std::string table = ::testing::internal::GetCapturedStdout();
    const json j = json::parse(read_text(out));
    EXPECT_EQ(j["split"], "val");
    EXPECT_EQ(j["samples"], 7);
    EXPECT_EQ(j["checkpoint_step"], 3);
    EXPECT_EQ(j["config"], fs::absolute(root() + "/run/config.resolved.yaml").string());
    for (const char* k : {"MAE px", "RMSE px", "hit@2px", "hit@5px", "gap MAE px", "slider MAE px", "samples"})
        EXPECT_NE(table.find(k), std::string::npos) << k << " missing from\n" << table;
    char mae[64];
    std::snprintf(mae, sizeof(mae), "%10.3f", j["mae_px"].get<double>());
    EXPECT_NE(table.find(mae), std::string::npos) << table;

    // Recompute every metric from the rows (MODEL_SPEC §3.5), independently of model::Metrics.
    const std::vector<sftest::CsvRow> rows = sftest::read_eval_csv(csv);
    ASSERT_EQ(rows.size(), 7u);
    double sum = 0, sq = 0, gap = 0, slider = 0, hit2 = 0, hit5 = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        const sftest::CsvRow& r = rows[i];
        const data::Label& l = samples_[i].label;
        EXPECT_EQ(r.id, i);
        EXPECT_EQ(r.v[0], l.gap_x);
        EXPECT_EQ(r.v[3], l.slider_y);
        const double eg = 0.5 * (std::fabs(r.v[4] - r.v[0]) + std::fabs(r.v[5] - r.v[1]));
        const double es = 0.5 * (std::fabs(r.v[6] - r.v[2]) + std::fabs(r.v[7] - r.v[3]));
        const double c = 0.5 * (eg + es);
        EXPECT_NEAR(r.v[10], eg, 1e-12);
        EXPECT_NEAR(r.v[11], es, 1e-12);
        EXPECT_NEAR(r.v[12], c, 1e-12);
        for (int k = 4; k < 8; ++k) EXPECT_TRUE(r.v[k] >= 0 && r.v[k] <= (k % 2 == 0 ? kW : kH)) << r.v[k];
        sum += c, sq += c * c, gap += eg, slider += es, hit2 += c <= 2, hit5 += c <= 5;
    }
    const double n = 7;
    EXPECT_NEAR(j["mae_px"].get<double>(), sum / n, 1e-9);
    EXPECT_NEAR(j["rmse_px"].get<double>(), std::sqrt(sq / n), 1e-9);
    EXPECT_NEAR(j["gap_mae"].get<double>(), gap / n, 1e-9);
    EXPECT_NEAR(j["slider_mae"].get<double>(), slider / n, 1e-9);
    EXPECT_NEAR(j["hit_le_2px"].get<double>(), 100 * hit2 / n, 1e-9);
    EXPECT_NEAR(j["hit_le_5px"].get<double>(), 100 * hit5 / n, 1e-9);

    // One batch of 7 (no padding) decodes every sample as the 3+3+1 batches did; the exported
    // weights with an explicit --config give the same numbers.
    const std::string csv7 = root() + "/e7.csv";
    ASSERT_EQ(tools::cmd_eval({"--checkpoint", root() + "/weights.safetensors", "--config",
                               root() + "/run/config.resolved.yaml", "--csv", csv7, "--out", root() + "/e7.json",
                               "--batch-size", "7"}),
              0);
    const std::vector<sftest::CsvRow> rows7 = sftest::read_eval_csv(csv7);
    ASSERT_EQ(rows7.size(), rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
        for (int k = 4; k < 10; ++k) EXPECT_NEAR(rows7[i].v[k], rows[i].v[k], 1e-3) << "sample " << i << " col " << k;
}

TEST_F(EvalPredict, EvalOnTheFixedSamples) {
    const std::string out = root() + "/fixed.json";
    ASSERT_EQ(tools::cmd_eval({"--checkpoint", ckpt(), "--out", out, "data.source=fixed", "data.num_samples=5"}), 0);
    EXPECT_EQ(json::parse(read_text(out))["samples"], 5);
}

TEST_F(EvalPredict, EvalRefusesBadInputWithTheReason) {
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", root() + "/nope.safetensors"}), "nope.safetensors",
                    "no such file");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--split", "test"}), "split 'test'", "holds no samples");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--split", "train"}), "train", "no such directory");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--split", "dev"}), "val, test or train");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "model.input_channels=4"}), "2 input channels",
                    "model.input_channels=4");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "model.input_height=96"}), "model.input_height=64", "96");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", root() + "/weights.safetensors"}), "no --config given",
                    "config.resolved.yaml");
    SF_EXPECT_ERROR(tools::cmd_eval({"--split", "val"}), "--checkpoint");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--csv", root() + "/no/such/dir/x.csv"}), "--csv",
                    "does not exist");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--batch-size", "0"}), "--batch-size", "'0'");
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--bogus"}), "--bogus");
    // Shards of another canvas than the model's.
    const std::string big = root() + "/big/val";
    fs::create_directories(big);
    data::GenConfig g;
    g.height = 2 * kH;
    g.width = 2 * kW;
    data::ShardWriter w(big + "/val_000000.sfshard", data::ShardSpec{2 * kH, 2 * kW, 1, false});
    const data::GenSample s = data::generate_sample(g, 1);
    w.add(s.pixels.data(), s.label);
    w.finish();
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", ckpt(), "--data", root() + "/big"}), "128x256", "64x128");
    // A file that is no checkpoint.
    std::ofstream(root() + "/junk.safetensors") << "junk";
    SF_EXPECT_ERROR(tools::cmd_eval({"--checkpoint", root() + "/junk.safetensors"}), "junk.safetensors");
}

// What predict must print for one image: the same preprocessing done here by hand, the model run
// directly, the canvas coordinates mapped back with the inverse letterbox.
model::Decoded direct_decode(const std::string& ckpt, const tools::TrainConfig& cfg, const std::vector<uint8_t>& gray,
                             const tools::Letterbox& lb) {
    tools::InferenceModel m(cfg, 1, tools::inspect_checkpoint(ckpt));
    std::vector<uint8_t> canvas(static_cast<size_t>(kW) * kH);
    tools::letterbox_pixels(lb, gray.data(), 1, canvas.data());
    const data::Label rect = tools::valid_rect_label(lb);
    kern::preprocess_ref(1, kH, kW, 1, canvas.data(), &rect, m.input());
    std::vector<model::Decoded> d;
    m.run(d);
    return d[0];
}

TEST_F(EvalPredict, PredictMapsBackToTheOriginalImage) {
    const std::string dir = root() + "/pred";
    fs::create_directories(dir);
    // Images of non-canvas sizes: a generated CAPTCHA (RGB PNG), its gray version, a JPEG.
    data::GenConfig g;
    g.seed = 2;
    g.height = kH;
    g.width = kW;
    data::GenDebug dbg;
    const data::GenSample s = data::generate_sample(g, 42, &dbg);
    ASSERT_NE(s.orig_w * kH, s.orig_h * kW) << "want a padded letterbox";
    data::write_png(dir + "/c.png", dbg.final.data(), s.orig_w, s.orig_h, 3);
    const std::vector<uint8_t> gray = tools::to_model_pixels(tools::Image8{s.orig_w, s.orig_h, 3, dbg.final}, 1);
    data::write_png(dir + "/c_gray.png", gray.data(), s.orig_w, s.orig_h, 1);
    ASSERT_NE(stbi_write_jpg((dir + "/c.jpg").c_str(), s.orig_w, s.orig_h, 3, dbg.final.data(), 90), 0);

    const std::string out = dir + "/p.json";
    ::testing::internal::CaptureStdout();
    ASSERT_EQ(tools::cmd_predict({"--checkpoint", ckpt(), "--json", out, "--batch-size", "2", dir + "/c.png",
                                  dir + "/c_gray.png", dir + "/c.jpg"}),
              0);
    const std::string printed = ::testing::internal::GetCapturedStdout();
    const json j = json::parse(read_text(out));
    ASSERT_EQ(j["predictions"].size(), 3u);
    EXPECT_NE(printed.find("c.jpg"), std::string::npos) << printed;

    const tools::Letterbox lb = tools::letterbox_geometry(s.orig_w, s.orig_h, kW, kH);
    const tools::TrainConfig cfg = tools::load_config(root() + "/run/config.resolved.yaml", {});
    const model::Decoded want = direct_decode(ckpt(), cfg, gray, lb);
    for (int k = 0; k < 2; ++k) {  // the RGB PNG and its gray version: identical model input
        const json& p = j["predictions"][static_cast<size_t>(k)];
        EXPECT_EQ(p["width"], s.orig_w);
        EXPECT_EQ(p["height"], s.orig_h);
        EXPECT_EQ(p["letterbox"]["pad_left"], lb.pad_left);
        EXPECT_EQ(p["letterbox"]["pad_top"], lb.pad_top);
        EXPECT_NEAR(p["letterbox"]["gap"][0].get<double>(), want.gap_x, 1e-3);
        EXPECT_NEAR(p["letterbox"]["slider"][1].get<double>(), want.slider_y, 1e-3);
        // x = (x' - pad_left) / scale, computed here by hand.
        EXPECT_NEAR(p["gap"]["x"].get<double>(), (want.gap_x - lb.pad_left) / lb.scale, 1e-3);
        EXPECT_NEAR(p["gap"]["y"].get<double>(), (want.gap_y - lb.pad_top) / lb.scale, 1e-3);
        EXPECT_NEAR(p["slider"]["x"].get<double>(), (want.slider_x - lb.pad_left) / lb.scale, 1e-3);
        EXPECT_NEAR(p["slider"]["y"].get<double>(), (want.slider_y - lb.pad_top) / lb.scale, 1e-3);
        EXPECT_NEAR(p["distance_px"].get<double>(), p["gap"]["x"].get<double>() - p["slider"]["x"].get<double>(), 1e-9);
    }
    // The JPEG: same geometry; its predictions lie in (or within a grid cell of) the image.
    const json& pj = j["predictions"][2];
    EXPECT_EQ(pj["letterbox"]["pad_top"], lb.pad_top);
    const double cell = 4 / lb.scale;
    for (const char* obj : {"gap", "slider"}) {
        EXPECT_GT(pj[obj]["x"].get<double>(), -cell);
        EXPECT_LT(pj[obj]["x"].get<double>(), s.orig_w + cell);
        EXPECT_GT(pj[obj]["y"].get<double>(), -cell);
        EXPECT_LT(pj[obj]["y"].get<double>(), s.orig_h + cell);
    }
}

TEST_F(EvalPredict, PredictRefusesBadImagesNamingThem) {
    const std::string dir = root() + "/badimg";
    fs::create_directories(dir);
    std::ofstream(dir + "/notes.png") << "not an image";
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt(), dir + "/missing.png"}), "missing.png", "no such file");
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt(), dir + "/notes.png"}), "notes.png",
                    "not a PNG or JPEG image");
    std::vector<uint8_t> px(50 * 20, 128);
    std::vector<uint8_t> png = data::encode_png(px.data(), 50, 20, 1);
    png[41] = 0;  // the zlib header, first byte of the IDAT data (8 signature + 25 IHDR + 8 chunk head)
    std::ofstream(dir + "/bad.png", std::ios::binary)
        .write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
    ASSERT_EQ(png[37], 'I');  // "IDAT"
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt(), dir + "/bad.png"}), "bad.png", "cannot decode");
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt()}), "no IMAGE");
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt(), dir}), "not a regular file");
    SF_EXPECT_ERROR(tools::cmd_predict({"--checkpoint", ckpt(), "--json", dir + "/x/y.json", dir + "/notes.png"}),
                    "--json", "does not exist");
    SF_EXPECT_ERROR(tools::cmd_predict({dir + "/notes.png"}), "--checkpoint");
}

}  // namespace
