// `slidefuse predict`: gap and slider positions for CAPTCHA images of any size. Each image goes
// through the original's preprocessing (MODEL_SPEC §4.2: gray as cv2 BGR2GRAY, optional 4-bit
// quantisation, bilinear letterbox onto the model canvas padded with 255, gray/255 + valid mask),
// the eval-mode forward and the masked decode (§1.7); the coordinates are mapped back to the
// original image's pixels (§1.7 step 4). docs/EVAL_PREDICT.md.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kernels/preprocess.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "tools/commands.h"
#include "tools/eval_model.h"
#include "tools/image_io.h"
#include "tools/letterbox.h"

namespace tools {

namespace {

std::string predict_usage() {
    return "usage: slidefuse predict --checkpoint PATH [--config PATH] [--json OUT.json] [--quant4]\n"
           "                         [--batch-size N] [key.path=value ...] IMAGE...\n"
           "  --checkpoint PATH  checkpoint or exported weights (.safetensors)\n"
           "  --config PATH      YAML config (default: the run's config.resolved.yaml beside the checkpoint)\n"
           "  --json PATH        also write the predictions as JSON\n"
           "  --quant4           keep the 4 high bits of each pixel (gray & 0xF0), for models trained on\n"
           "                     4-bit data (the original's bits_to_keep: 4)\n"
           "  --batch-size N     images per forward (default: min(#images, train.batch_size, 4))\n"
           "  IMAGE              PNG or JPEG, any size, gray or RGB(A) (alpha is ignored)\n"
           "Coordinates are in the original image's pixels (x right, y down, pixel i covers [i, i+1)).";
}

struct Args {
    std::string checkpoint, config, json;
    bool quant4 = false, help = false;
    int batch = 0;
    std::vector<std::string> images, overrides;
};

Args parse_args(const std::vector<std::string>& args) {
    Args a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& s = args[i];
        if (s == "--help" || s == "-h") {
            a.help = true;
        } else if (s == "--checkpoint") {
            a.checkpoint = option_value(args, i);
        } else if (s == "--config") {
            a.config = option_value(args, i);
        } else if (s == "--json") {
            a.json = option_value(args, i);
        } else if (s == "--quant4") {
            a.quant4 = true;
        } else if (s == "--batch-size") {
            a.batch = parse_positive_int(s, option_value(args, i));
        } else if (s.rfind("--", 0) == 0) {
            SF_FAIL("unknown option '%s'\n%s", s.c_str(), predict_usage().c_str());
        } else if (s.find('=') != std::string::npos && s.find('/') == std::string::npos && s.find('.') < s.find('=')) {
            a.overrides.push_back(s);  // key.path=value (an image path with '=' needs a '/', e.g. ./a=b.png)
        } else {
            a.images.push_back(s);
        }
    }
    if (a.help) return a;
    SF_CHECK(!a.checkpoint.empty(), "missing --checkpoint PATH\n%s", predict_usage().c_str());
    SF_CHECK(!a.images.empty(), "no IMAGE given\n%s", predict_usage().c_str());
    return a;
}

struct Prediction {
    std::string image;
    Letterbox lb;
    model::Decoded canvas;                                    // letterbox pixels
    double gap_x = 0, gap_y = 0, slider_x = 0, slider_y = 0;  // original image pixels
};

// Reads one image and writes its model input (H, W, C floats) into `input`.
Letterbox prepare(const std::string& path, const model::NetShape& s, bool quant4, std::vector<uint8_t>& canvas,
                  float* input) {
    const Image8 im = read_image(path);
    const int cp = s.channels - 1;
    std::vector<uint8_t> px = to_model_pixels(im, cp);
    if (quant4)
        for (uint8_t& v : px) v &= 0xF0;
    const Letterbox lb = letterbox_geometry(im.width, im.height, s.width, s.height);
    canvas.resize(static_cast<size_t>(s.width) * s.height * cp);
    letterbox_pixels(lb, px.data(), cp, canvas.data());
    const data::Label rect = valid_rect_label(lb);
    kern::preprocess_ref(1, s.height, s.width, cp, canvas.data(), &rect, input);
    return lb;
}

nlohmann::json to_json(const Prediction& p) {
    const Letterbox& lb = p.lb;
    return {{"image", p.image},
            {"width", lb.src_w},
            {"height", lb.src_h},
            {"gap", {{"x", p.gap_x}, {"y", p.gap_y}, {"score", p.canvas.gap_score}}},
            {"slider", {{"x", p.slider_x}, {"y", p.slider_y}, {"score", p.canvas.slider_score}}},
            {"distance_px", p.gap_x - p.slider_x},
            {"letterbox",
             {{"scale", lb.scale},
              {"pad_left", lb.pad_left},
              {"pad_top", lb.pad_top},
              {"resized", {lb.resized_w, lb.resized_h}},
              {"gap", {p.canvas.gap_x, p.canvas.gap_y}},
              {"slider", {p.canvas.slider_x, p.canvas.slider_y}}}}};
}

// Runs every readable image through the model, `batch` at a time; an image that cannot be read
// is reported (stderr, and in `failed`) and the others go on.
std::vector<Prediction> predict_images(const Args& a, InferenceModel& model, int batch,
                                       std::vector<std::pair<std::string, std::string>>& failed) {
    const model::NetShape& s = model.shape();
    const size_t per = static_cast<size_t>(s.height) * s.width * s.channels;
    std::vector<Prediction> preds;
    std::vector<uint8_t> canvas;
    std::vector<model::Decoded> decoded;
    size_t next = 0;
    while (next < a.images.size()) {
        std::vector<Prediction> slots;
        for (; next < a.images.size() && static_cast<int>(slots.size()) < batch; ++next) {
            Prediction p;
            p.image = a.images[next];
            try {
                p.lb = prepare(p.image, s, a.quant4, canvas, model.input() + slots.size() * per);
                slots.push_back(p);
            } catch (const rt::Error& e) {
                std::fprintf(stderr, "slidefuse predict: skipping %s: %s\n", p.image.c_str(), e.message().c_str());
                failed.emplace_back(p.image, e.message());
            }
        }
        const size_t n = slots.size();
        if (n == 0) continue;
        for (size_t b = n; b < static_cast<size_t>(batch); ++b)  // unused slots repeat the last image
            std::copy(model.input() + (n - 1) * per, model.input() + n * per, model.input() + b * per);
        model.run(decoded);
        for (size_t b = 0; b < n; ++b) {
            Prediction& p = slots[b];
            p.canvas = decoded[b];
            to_original(p.lb, p.canvas.gap_x, p.canvas.gap_y, &p.gap_x, &p.gap_y);
            to_original(p.lb, p.canvas.slider_x, p.canvas.slider_y, &p.slider_x, &p.slider_y);
            std::printf("%s (%dx%d): gap (%.1f, %.1f) slider (%.1f, %.1f) distance %.1f px [scores %.3f %.3f]\n",
                        p.image.c_str(), p.lb.src_w, p.lb.src_h, p.gap_x, p.gap_y, p.slider_x, p.slider_y,
                        p.gap_x - p.slider_x, p.canvas.gap_score, p.canvas.slider_score);
            preds.push_back(p);
        }
    }
    return preds;
}

}  // namespace

int cmd_predict(const std::vector<std::string>& argv) {
    const Args a = parse_args(argv);
    if (a.help) {
        std::printf("%s\n", predict_usage().c_str());
        return 0;
    }
    if (!a.json.empty()) check_output_path("--json", a.json);
    const CheckpointInfo ckpt = inspect_checkpoint(a.checkpoint);
    std::string config_used;
    const TrainConfig cfg = load_inference_config(a.config, ckpt, a.overrides, &config_used);
    const int n_images = static_cast<int>(a.images.size());
    const int batch = a.batch > 0 ? a.batch : std::min(n_images, default_eval_batch(cfg));
    InferenceModel model(cfg, batch, ckpt);
    const model::NetShape& s = model.shape();
    SF_LOG_INFO("predict: %d image(s) with %s (config %s), canvas %dx%d, %s backend", n_images, ckpt.path.c_str(),
                config_used.c_str(), s.width, s.height, model.backend());

    std::vector<std::pair<std::string, std::string>> failed;  // (image, why)
    const std::vector<Prediction> preds = predict_images(a, model, batch, failed);
    if (!a.json.empty()) {
        nlohmann::json j = {{"checkpoint", ckpt.path},
                            {"config", config_used},
                            {"canvas", {s.width, s.height}},
                            {"quant4", a.quant4},
                            {"predictions", nlohmann::json::array()},
                            {"errors", nlohmann::json::array()}};
        for (const Prediction& p : preds) j["predictions"].push_back(to_json(p));
        for (const auto& f : failed) j["errors"].push_back({{"image", f.first}, {"error", f.second}});
        std::ofstream f(a.json);
        SF_CHECK(f.good(), "cannot write %s", a.json.c_str());
        f << j.dump(2) << "\n";
        f.close();
        SF_CHECK(!f.fail(), "error writing %s", a.json.c_str());
    }
    SF_CHECK(failed.empty(), "%zu of %d image(s) could not be read (the first: %s: %s); the others were predicted",
             failed.size(), n_images, failed[0].first.c_str(), failed[0].second.c_str());
    return 0;
}

}  // namespace tools
