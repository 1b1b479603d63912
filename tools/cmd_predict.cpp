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

}  // namespace

int cmd_predict(const std::vector<std::string>& argv) {
    const Args a = parse_args(argv);
    if (a.help) {
        std::printf("%s\n", predict_usage().c_str());
        return 0;
    }
    for (const std::string& im : a.images) {  // before the model is built: a typo fails at once
        std::error_code ec;
        SF_CHECK(std::filesystem::exists(im, ec), "%s: no such file", im.c_str());
        SF_CHECK(std::filesystem::is_regular_file(im, ec), "%s: not a regular file", im.c_str());
    }
    if (!a.json.empty()) check_output_path("--json", a.json);
    const CheckpointInfo ckpt = inspect_checkpoint(a.checkpoint);
    std::string config_used;
    const TrainConfig cfg = load_inference_config(a.config, ckpt, a.overrides, &config_used);
    const int n_images = static_cast<int>(a.images.size());
    const int batch = a.batch > 0 ? a.batch : std::min(n_images, default_eval_batch(cfg));
    InferenceModel model(cfg, batch, ckpt);
    const model::NetShape& s = model.shape();
    const size_t per = static_cast<size_t>(s.height) * s.width * s.channels;
    SF_LOG_INFO("predict: %d image(s) with %s (config %s), canvas %dx%d, %s backend", n_images, ckpt.path.c_str(),
                config_used.c_str(), s.width, s.height, model.backend());

    std::vector<Prediction> preds;
    std::vector<uint8_t> canvas;
    std::vector<model::Decoded> decoded;
    for (int first = 0; first < n_images; first += batch) {
        const int n = std::min(batch, n_images - first);
        std::vector<Letterbox> lbs;
        for (int b = 0; b < n; ++b)
            lbs.push_back(prepare(a.images[static_cast<size_t>(first + b)], s, a.quant4, canvas,
                                  model.input() + static_cast<size_t>(b) * per));
        for (int b = n; b < batch; ++b)  // unused slots repeat the last image
            std::copy(model.input() + static_cast<size_t>(n - 1) * per, model.input() + static_cast<size_t>(n) * per,
                      model.input() + static_cast<size_t>(b) * per);
        model.run(decoded);
        for (int b = 0; b < n; ++b) {
            Prediction p;
            p.image = a.images[static_cast<size_t>(first + b)];
            p.lb = lbs[static_cast<size_t>(b)];
            p.canvas = decoded[static_cast<size_t>(b)];
            to_original(p.lb, p.canvas.gap_x, p.canvas.gap_y, &p.gap_x, &p.gap_y);
            to_original(p.lb, p.canvas.slider_x, p.canvas.slider_y, &p.slider_x, &p.slider_y);
            std::printf("%s (%dx%d): gap (%.1f, %.1f) slider (%.1f, %.1f) distance %.1f px [scores %.3f %.3f]\n",
                        p.image.c_str(), p.lb.src_w, p.lb.src_h, p.gap_x, p.gap_y, p.slider_x, p.slider_y,
                        p.gap_x - p.slider_x, p.canvas.gap_score, p.canvas.slider_score);
            preds.push_back(p);
        }
    }
    if (!a.json.empty()) {
        nlohmann::json j = {{"checkpoint", ckpt.path},
                            {"config", config_used},
                            {"canvas", {s.width, s.height}},
                            {"quant4", a.quant4},
                            {"predictions", nlohmann::json::array()}};
        for (const Prediction& p : preds) j["predictions"].push_back(to_json(p));
        std::ofstream f(a.json);
        SF_CHECK(f.good(), "cannot write %s", a.json.c_str());
        f << j.dump(2) << "\n";
        f.close();
        SF_CHECK(!f.fail(), "error writing %s", a.json.c_str());
    }
    return 0;
}

}  // namespace tools
