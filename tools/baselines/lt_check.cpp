// The LibTorch baseline's self-check for the tests (--check-dir; lt_train.h).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "lt_train.h"

namespace ltb {

// ------------------------------------------------------------------------------------------------
// Self-check for tests/baselines/test_baselines.py. DIR holds input.f32 ((N, 2, H, W) float32, NCHW)
// and labels.bin (N 72-byte records), optionally pixels.u8 ((N, H, W) uint8). Writes, with the
// model initialised by --seed (preprocessed.f32 only with pixels.u8):
//   preprocessed.f32     preprocess() of pixels.u8 + the labels' rectangles, (N, 2, H, W) NCHW
//   params.tsv   name, shape (AxB or scalar), param|buffer, sum, sum of squares (state_dict order)
//   logits_<head>.f32    forward in fp32 (train mode) on input.f32
//   loss.tsv     the 7 terms and total (fp32) on those logits
//   grads.tsv    name, sum, L2 norm of d total / d parameter
//   steps.tsv    mode, step, loss: 3 recipe steps on the batch from a fresh model, fp32 and bf16_cl
// ------------------------------------------------------------------------------------------------
namespace {

std::vector<char> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("cannot read " + path);
    return std::vector<char>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

std::string shape_str(const Tensor& t) {
    if (t.dim() == 0) return "scalar";
    std::string s;
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? "x" : "") + std::to_string(t.size(i));
    return s;
}

}  // namespace

int check_dir(const Settings& s) {
    const std::string dir = s.check_dir;
    const int64_t n = s.batch_sizes.at(0), h = s.height, w = s.width;
    std::vector<char> in = read_file(dir + "/input.f32"), lb = read_file(dir + "/labels.bin");
    if (in.size() != static_cast<size_t>(n * 2 * h * w * 4) || lb.size() != static_cast<size_t>(n * 72))
        fail("check-dir: input.f32 / labels.bin sizes do not match --batch-sizes N --height H --width W");
    HostData d{h, w, 1, std::vector<uint8_t>(static_cast<size_t>(n * h * w)), std::vector<Label>(static_cast<size_t>(n))};
    std::memcpy(d.labels.data(), lb.data(), lb.size());
    std::ifstream px(dir + "/pixels.u8", std::ios::binary);
    const bool have_pixels = static_cast<bool>(px);
    if (have_pixels && !px.read(reinterpret_cast<char*>(d.pixels.data()), static_cast<std::streamsize>(d.pixels.size())))
        fail("check-dir: pixels.u8 must hold N*H*W bytes");
    const torch::Device cpu(torch::kCPU);
    Batch b = device_batch(d, 0, n, cpu);
    Tensor x = torch::from_blob(in.data(), {n, 2, h, w}, torch::kFloat32).clone();
    if (have_pixels) {  // the benchmark's preprocessing of those pixels, NCHW float32
        Tensor p = preprocess(b, make_lut(cpu), true).contiguous();
        std::ofstream f(dir + "/preprocessed.f32", std::ios::binary);
        f.write(static_cast<const char*>(p.data_ptr()), static_cast<std::streamsize>(p.numel() * 4));
    }

    SiderModel m(2);
    init_weights(m, s.seed);
    std::vector<Entry> entries;
    state_entries(*m, "", entries);
    {
        std::ofstream f(dir + "/params.tsv");
        for (const Entry& e : entries) {
            Tensor t = e.t.to(torch::kFloat64);
            f << e.name << "\t" << shape_str(e.t) << "\t" << (e.param ? "param" : "buffer") << "\t"
              << jnum(t.sum().item<double>()) << "\t" << jnum(t.pow(2).sum().item<double>()) << "\n";
        }
    }
    m->train();
    Logits lg = m->forward(x);
    const std::pair<const char*, Tensor*> heads[] = {
        {"heatmap_gap", &lg.gap}, {"heatmap_piece", &lg.piece}, {"offset", &lg.offset}, {"angle", &lg.angle}};
    for (const auto& hd : heads) {
        Tensor t = hd.second->detach().contiguous();
        std::ofstream f(dir + "/logits_" + hd.first + ".f32", std::ios::binary);
        f.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.numel() * 4));
    }
    LossOut l = sider_loss(lg, x, b, s.variant_sider);
    {
        std::ofstream f(dir + "/loss.tsv");
        for (int i = 0; i < 7; ++i) f << kTerms[i] << "\t" << jnum(l.terms[i].item<double>()) << "\n";
        f << "total\t" << jnum(l.total.item<double>()) << "\n";
    }
    l.total.backward();
    {
        std::ofstream f(dir + "/grads.tsv");
        for (const auto& kv : m->named_parameters(true)) {
            Tensor g = kv.value().grad().to(torch::kFloat64);
            f << kv.key() << "\t" << jnum(g.sum().item<double>()) << "\t" << jnum(g.norm().item<double>()) << "\n";
        }
    }
    std::ofstream f(dir + "/steps.tsv");
    for (const char* mode : {"fp32", "bf16_cl"}) {
        const bool bf = std::string(mode) == "bf16_cl";
        SiderModel fresh(2);
        init_weights(fresh, s.seed);
        Trainer tr(fresh, bf, bf, s.variant_sider, torch::kCPU);
        // Trainer::step preprocesses pixels; the check feeds the given input tensor instead.
        for (int i = 0; i < 3; ++i) {
            Tensor xi = bf ? x.contiguous(torch::MemoryFormat::ChannelsLast) : x;
            Logits li;
            {
                AutocastScope ac(bf, torch::kCPU);
                li = tr.model->forward(xi);
            }
            LossOut lo = sider_loss(li, xi, b, s.variant_sider);
            tr.opt->zero_grad();
            lo.total.backward();
            tr.clip_grads();
            tr.opt->step();
            f << mode << "\t" << i << "\t" << jnum(lo.total.item<double>()) << "\n";
        }
    }
    std::printf("check-dir: wrote params.tsv, logits_*.f32, loss.tsv, grads.tsv, steps.tsv to %s\n", dir.c_str());
    return 0;
}

}  // namespace ltb
