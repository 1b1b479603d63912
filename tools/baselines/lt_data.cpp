// The LibTorch baseline's data (lt_data.h).
#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "lt_data.h"

namespace ltb {

// ------------------------------------------------------------------------------------------------
// Data: compact shards (docs/FORMAT.md, version 1; read only, the record CRCs are not checked
// here — tools/baselines/shards.py checks them) or synthetic samples.
// ------------------------------------------------------------------------------------------------


namespace {

template <typename T>
T rd(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}

std::vector<std::string> list_shards(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = opendir(dir.c_str());
    if (!d) fail(dir + ": no such directory (expected a folder of *.sfshard files)");
    while (dirent* e = readdir(d)) {
        const std::string n = e->d_name;
        if (n.size() > 8 && n.substr(n.size() - 8) == ".sfshard") out.push_back(dir + "/" + n);
    }
    closedir(d);
    if (out.empty()) fail(dir + ": holds no *.sfshard files (empty dataset)");
    std::sort(out.begin(), out.end());
    return out;
}

// Samples 0 .. n-1 in file order across the folder's shards, wrapping around a smaller dataset.
}  // namespace

HostData read_shards(const std::string& dir, int64_t n) {
    struct Shard {
        std::string path;
        uint64_t count, labels_offset, stored;
        bool quant4;
    };
    std::vector<Shard> shards;
    HostData out;
    uint64_t total = 0;
    for (const std::string& p : list_shards(dir)) {
        std::ifstream f(p, std::ios::binary);
        uint8_t hdr[128];
        if (!f.read(reinterpret_cast<char*>(hdr), 128)) fail(p + ": truncated header");
        if (std::memcmp(hdr, "SFSHARD\0", 8) != 0) fail(p + ": not a slidefuse shard (bad magic)");
        if (rd<uint32_t>(hdr + 8) != 1) fail(p + ": unsupported shard version");
        const int64_t h = rd<uint32_t>(hdr + 24), w = rd<uint32_t>(hdr + 28), c = rd<uint32_t>(hdr + 32);
        const uint32_t flags = rd<uint32_t>(hdr + 36);
        if (out.h == 0) out.h = h, out.w = w, out.c = c;
        if (h != out.h || w != out.w || c != out.c) fail(p + ": shard dims differ from the first shard's");
        Shard s{p, rd<uint64_t>(hdr + 16), rd<uint64_t>(hdr + 56), rd<uint32_t>(hdr + 44), (flags & 1u) != 0};
        total += s.count;
        shards.push_back(s);
    }
    if (total == 0) fail(dir + ": the shards hold no samples");
    const size_t per = static_cast<size_t>(out.h * out.w * out.c);
    out.pixels.resize(static_cast<size_t>(n) * per);
    out.labels.resize(static_cast<size_t>(n));
    std::vector<uint8_t> buf;
    for (int64_t k = 0; k < n; ++k) {
        uint64_t g = static_cast<uint64_t>(k) % total;
        size_t si = 0;
        while (g >= shards[si].count) g -= shards[si++].count;
        const Shard& s = shards[si];
        std::ifstream f(s.path, std::ios::binary);
        buf.resize(s.stored);
        f.seekg(static_cast<std::streamoff>(4096 + g * s.stored));
        if (!f.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(s.stored)))
            fail(s.path + ": truncated pixel record");
        uint8_t* dst = out.pixels.data() + static_cast<size_t>(k) * per;
        if (s.quant4) {
            for (size_t j = 0; j < s.stored; ++j) {
                dst[2 * j] = buf[j] & 0xF0;
                dst[2 * j + 1] = static_cast<uint8_t>((buf[j] & 0x0F) << 4);
            }
        } else {
            std::memcpy(dst, buf.data(), per);
        }
        f.seekg(static_cast<std::streamoff>(s.labels_offset + g * 72));
        if (!f.read(reinterpret_cast<char*>(&out.labels[static_cast<size_t>(k)]), 72))
            fail(s.path + ": truncated label record");
    }
    return out;
}

// Random but valid samples (noise pixels, 255 in the padding; letterbox rectangle; gap, slider,
// 0-4 fakes inside it; a rotation on about half of them). Not the same numbers as the Python
// --synthetic (different generator); compare.py gives every runner the same shards instead.
HostData synthetic(int64_t n, int64_t h, int64_t w, int64_t c, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
    auto irange = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
    HostData d{h, w, c, std::vector<uint8_t>(static_cast<size_t>(n * h * w * c)), std::vector<Label>(static_cast<size_t>(n))};
    for (int64_t i = 0; i < n; ++i) {
        int64_t x0 = 0, y0 = 0, x1 = w, y1 = h;
        if (uni(0, 1) < 0.5) {
            const int64_t vh = irange(h / 2, h);
            y0 = irange(0, h - vh), y1 = y0 + vh;
        } else {
            const int64_t vw = irange(w / 2, w);
            x0 = irange(0, w - vw), x1 = x0 + vw;
        }
        uint8_t* px = d.pixels.data() + static_cast<size_t>(i * h * w * c);
        uint64_t bits = 0;
        int left = 0;
        for (int64_t y = 0; y < h; ++y)
            for (int64_t x = 0; x < w; ++x)
                for (int64_t k = 0; k < c; ++k) {
                    if (left == 0) bits = rng(), left = 8;  // 8 random bytes per draw
                    const uint8_t v = static_cast<uint8_t>(bits & 0xFF);
                    bits >>= 8, --left;
                    px[(y * w + x) * c + k] = (x < x0 || x >= x1 || y < y0 || y >= y1) ? 255 : v;
                }
        Label& l = d.labels[static_cast<size_t>(i)];
        std::memset(&l, 0, sizeof(l));
        auto pt = [&](float& px_, float& py_) {
            px_ = static_cast<float>(uni(static_cast<double>(x0), static_cast<double>(x1) - 1e-3));
            py_ = static_cast<float>(uni(static_cast<double>(y0), static_cast<double>(y1) - 1e-3));
        };
        pt(l.gap_x, l.gap_y);
        pt(l.slider_x, l.slider_y);
        l.angle_rad = uni(0, 1) < 0.5 ? static_cast<float>(uni(-0.3, 0.3)) : 0.0f;
        l.num_fakes = static_cast<int32_t>(irange(0, 4));
        for (int k = 0; k < l.num_fakes; ++k) pt(l.fake_x[k], l.fake_y[k]);
        l.rect_x0 = static_cast<float>(x0), l.rect_y0 = static_cast<float>(y0);
        l.rect_x1 = static_cast<float>(x1), l.rect_y1 = static_cast<float>(y1);
    }
    return d;
}


Batch device_batch(const HostData& d, int64_t first, int64_t n, const torch::Device& dev) {
    const int64_t per = d.h * d.w * d.c;
    std::vector<float> gap, slider, angle, fakes, rect;
    std::vector<int64_t> nf;
    for (int64_t i = first; i < first + n; ++i) {
        const Label& l = d.labels[static_cast<size_t>(i)];
        gap.insert(gap.end(), {l.gap_x, l.gap_y});
        slider.insert(slider.end(), {l.slider_x, l.slider_y});
        angle.push_back(l.angle_rad);
        for (int k = 0; k < 4; ++k) fakes.insert(fakes.end(), {l.fake_x[k], l.fake_y[k]});
        nf.push_back(l.num_fakes);
        rect.insert(rect.end(), {l.rect_x0, l.rect_y0, l.rect_x1, l.rect_y1});
    }
    auto f32 = [&](std::vector<float>& v, std::vector<int64_t> shape) {
        return torch::from_blob(v.data(), shape, torch::kFloat32).clone().to(dev);
    };
    Batch b;
    b.pixels = torch::from_blob(const_cast<uint8_t*>(d.pixels.data()) + first * per, {n, d.h, d.w, d.c}, torch::kUInt8)
                   .clone()
                   .to(dev);
    b.gap = f32(gap, {n, 2});
    b.slider = f32(slider, {n, 2});
    b.angle = f32(angle, {n});
    b.fakes = f32(fakes, {n, 4, 2});
    b.rect = f32(rect, {n, 4});
    b.num_fakes = torch::from_blob(nf.data(), {n}, torch::kInt64).clone().to(dev);
    return b;
}

// v/255 for v = 0..255 by IEEE float division on the host, on `dev` (made once per trainer: a
// host->device copy inside the step would synchronise).
Tensor make_lut(const torch::Device& dev) {
    std::vector<float> v(256);
    for (int i = 0; i < 256; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i) / 255.0f;
    return torch::from_blob(v.data(), {256}, torch::kFloat32).clone().to(dev);  // clone: v dies here
}

// [pixels/255 ..., mask] as kernels/preprocess.cu: v/255 from the table, mask 1 where
// x0 <= x < x1 and y0 <= y < y1 for integer x, y. (N, Cp+1, H, W), NHWC in memory when channels_last.
Tensor preprocess(const Batch& b, const Tensor& lut, bool channels_last) {
    const auto dev = b.pixels.device();
    const int64_t h = b.pixels.size(1), w = b.pixels.size(2);
    Tensor img = lut.index({b.pixels.to(torch::kLong)});
    Tensor xs = torch::arange(w, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    Tensor ys = torch::arange(h, torch::TensorOptions().dtype(torch::kFloat32).device(dev));
    Tensor col = (b.rect.index({Slice(), Slice(0, 1)}) <= xs).logical_and(xs < b.rect.index({Slice(), Slice(2, 3)}));
    Tensor row = (b.rect.index({Slice(), Slice(1, 2)}) <= ys).logical_and(ys < b.rect.index({Slice(), Slice(3, 4)}));
    Tensor mask = row.unsqueeze(2).logical_and(col.unsqueeze(1)).to(torch::kFloat32);
    Tensor x = torch::cat({img, mask.unsqueeze(3)}, 3).permute({0, 3, 1, 2});
    return x.contiguous(channels_last ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
}

}  // namespace ltb
