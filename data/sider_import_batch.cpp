// SiderBatch: one batch of the original's NPY dataset, validated at open and decoded per sample
// into uint8 pixels and an exact data::Label (see sider_import.h and docs/FORMAT.md).
#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/npy.h"
#include "data/sider_import.h"
#include "runtime/error.h"

namespace data {

namespace {

using json = nlohmann::json;

constexpr int kStride = 4;           // heatmap/offset grid stride (MODEL_SPEC §3.2)
constexpr double kPixelTol = 1e-3;   // |v*255 - round(v*255)| allowed for a float32 of k/255
constexpr double kOffsetTol = 1e-5;  // offsets .npy (float32) vs offsets_meta (float64)
constexpr double kOffsetLimit = 0.5 + 1e-6;

const json& list_of(const json& meta, const char* key, size_t n, const std::string& file) {
    SF_CHECK(meta.contains(key), "%s: lacks the key '%s'", file.c_str(), key);
    const json& v = meta[key];
    SF_CHECK(v.is_array(), "%s: '%s' is not a list", file.c_str(), key);
    SF_CHECK(v.size() == n, "%s: '%s' has %zu entries, the batch holds %zu samples", file.c_str(), key, v.size(), n);
    return v;
}

// [a, b] of two JSON integers (is_int) or two numbers.
std::array<double, 2> pair_of(const json& v, bool is_int, const std::string& file, const std::string& what) {
    const bool ok =
        v.is_array() && v.size() == 2 &&
        (is_int ? v[0].is_number_integer() && v[1].is_number_integer() : v[0].is_number() && v[1].is_number());
    SF_CHECK(ok, "%s: %s is %s, expected a pair of %s", file.c_str(), what.c_str(), v.dump().c_str(),
             is_int ? "integers" : "numbers");
    return {v[0].get<double>(), v[1].get<double>()};
}

}  // namespace

struct SiderBatch::Impl {
    SiderFileSet files;
    NpyFile image, heat, off;
    ShardSpec spec;
    size_t n = 0, c = 0, gh = 0, gw = 0;
    // From the meta JSON, per sample.
    std::vector<double> angles;
    std::vector<std::vector<std::array<double, 2>>> fakes;  // grid cells (col, row)
    std::vector<std::array<double, 4>> grid, offs;          // optional: gap u, v, slider u, v / du, dv, du, dv
    std::vector<std::array<double, 4>> rects;               // optional, from transform_params: x0, y0, x1, y1

    explicit Impl(const SiderFileSet& f) : files(f), image(f.image), heat(f.heatmaps), off(f.offsets) {}
    void check_arrays();
    void read_meta();
    void decode_pixels(size_t i, uint8_t* out) const;
    void decode_rect(size_t i, Label* l) const;
    void decode_centre(size_t i, int obj, float* x, float* y) const;
};

void SiderBatch::Impl::check_arrays() {
    const NpyArray& a = image.array();
    const char* p = files.image.c_str();
    SF_CHECK(a.dtype == NpyDType::Float32 && a.shape.size() == 4,
             "%s: dtype '%s' shape %s, expected float32 '<f4' [N, C, H, W]", p, a.descr.c_str(), a.shape_str().c_str());
    n = static_cast<size_t>(a.shape[0]);
    c = static_cast<size_t>(a.shape[1]);
    SF_CHECK(n >= 1, "%s: holds no samples (shape %s)", p, a.shape_str().c_str());
    SF_CHECK(c == 2 || c == 4, "%s: %zu channels, expected 2 (gray + mask) or 4 (RGB + mask)", p, c);
    const int64_t h = a.shape[2], w = a.shape[3];
    SF_CHECK(
        h >= kStride && w >= kStride && h % kStride == 0 && w % kStride == 0 && h <= kShardMaxDim && w <= kShardMaxDim,
        "%s: image size %lldx%lld (HxW) must be multiples of %d up to %d", p, static_cast<long long>(h),
        static_cast<long long>(w), kStride, kShardMaxDim);
    spec.height = static_cast<int>(h);
    spec.width = static_cast<int>(w);
    spec.channels = c == 2 ? 1 : 3;
    gh = static_cast<size_t>(h / kStride);
    gw = static_cast<size_t>(w / kStride);
    const int64_t N = static_cast<int64_t>(n), H4 = h / kStride, W4 = w / kStride;
    heat.array().expect(NpyDType::Float32, {N, 2, H4, W4});
    off.array().expect(NpyDType::Float32, {N, 4, H4, W4});
}

void SiderBatch::Impl::read_meta() {
    const std::string& f = files.meta;
    std::ifstream in(f, std::ios::binary);
    SF_CHECK(in.good(), "%s: cannot open", f.c_str());
    std::stringstream ss;
    ss << in.rdbuf();
    json m;
    try {
        m = json::parse(ss.str());
    } catch (const std::exception& e) {
        SF_FAIL("%s: not valid JSON: %s", f.c_str(), e.what());
    }
    SF_CHECK(m.is_object(), "%s: not a JSON object", f.c_str());
    if (m.contains("batch_size"))
        SF_CHECK(m["batch_size"].is_number_integer() && m["batch_size"].get<int64_t>() == static_cast<int64_t>(n),
                 "%s: batch_size %s, the NPY files hold %zu samples", f.c_str(), m["batch_size"].dump().c_str(), n);
    if (m.contains("sample_ids")) list_of(m, "sample_ids", n, f);
    const json& ang = list_of(m, "gap_angles", n, f);
    const json& cg = list_of(m, "confusing_gaps", n, f);
    for (size_t i = 0; i < n; ++i) {
        const std::string at = "sample " + std::to_string(i);
        SF_CHECK(ang[i].is_number(), "%s: gap_angles[%zu] = %s is not a number", f.c_str(), i, ang[i].dump().c_str());
        angles.push_back(ang[i].get<double>());
        SF_CHECK(cg[i].is_array(), "%s: confusing_gaps[%zu] is not a list", f.c_str(), i);
        SF_CHECK(cg[i].size() <= static_cast<size_t>(kMaxFakeGaps),
                 "%s: %s has %zu confusing gaps, at most %d are supported", f.c_str(), at.c_str(), cg[i].size(),
                 kMaxFakeGaps);
        fakes.emplace_back();
        for (size_t k = 0; k < cg[i].size(); ++k)
            fakes.back().push_back(
                pair_of(cg[i][k], true, f, "confusing_gaps[" + std::to_string(i) + "][" + std::to_string(k) + "]"));
    }
    if (m.contains("grid_coords") || m.contains("offsets_meta")) {
        const json& g = list_of(m, "grid_coords", n, f);
        const json& o = list_of(m, "offsets_meta", n, f);
        for (size_t i = 0; i < n; ++i) {
            const std::string gi = "grid_coords[" + std::to_string(i) + "]",
                              oi = "offsets_meta[" + std::to_string(i) + "]";
            SF_CHECK(g[i].is_object() && g[i].contains("gap") && g[i].contains("slider"),
                     "%s: %s lacks 'gap' or 'slider'", f.c_str(), gi.c_str());
            SF_CHECK(o[i].is_object() && o[i].contains("gap") && o[i].contains("slider"),
                     "%s: %s lacks 'gap' or 'slider'", f.c_str(), oi.c_str());
            const auto gg = pair_of(g[i]["gap"], true, f, gi + ".gap"),
                       gs = pair_of(g[i]["slider"], true, f, gi + ".slider");
            const auto og = pair_of(o[i]["gap"], false, f, oi + ".gap"),
                       os = pair_of(o[i]["slider"], false, f, oi + ".slider");
            grid.push_back({gg[0], gg[1], gs[0], gs[1]});
            offs.push_back({og[0], og[1], os[0], os[1]});
        }
    }
    if (m.contains("transform_params")) {
        const json& t = list_of(m, "transform_params", n, f);
        for (size_t i = 0; i < n; ++i) {
            const std::string ti = "transform_params[" + std::to_string(i) + "]";
            const bool ok = t[i].is_object() && t[i].contains("pad_left") && t[i]["pad_left"].is_number_integer() &&
                            t[i].contains("pad_top") && t[i]["pad_top"].is_number_integer() &&
                            t[i].contains("resized_size");
            SF_CHECK(ok, "%s: %s lacks integer pad_left, pad_top or resized_size", f.c_str(), ti.c_str());
            const auto rs = pair_of(t[i]["resized_size"], true, f, ti + ".resized_size");
            const double x0 = t[i]["pad_left"].get<double>(), y0 = t[i]["pad_top"].get<double>();
            rects.push_back({x0, y0, x0 + rs[0], y0 + rs[1]});
        }
    }
}

SiderBatch::SiderBatch(const SiderFileSet& files) : impl_(new Impl(files)) {
    impl_->check_arrays();
    impl_->read_meta();
}

SiderBatch::~SiderBatch() = default;
SiderBatch::SiderBatch(SiderBatch&&) noexcept = default;
size_t SiderBatch::count() const { return impl_->n; }
const ShardSpec& SiderBatch::spec() const { return impl_->spec; }

// Image channels 0..C-2 -> uint8 HWC; each value must be k/255 for an integer k (float32 rounding aside).
void SiderBatch::Impl::decode_pixels(size_t i, uint8_t* out) const {
    const NpyArray& a = image.array();
    const size_t hw = static_cast<size_t>(spec.height) * spec.width, pc = static_cast<size_t>(spec.channels);
    for (size_t ch = 0; ch < pc; ++ch) {
        const size_t plane = (i * c + ch) * hw;
        for (size_t k = 0; k < hw; ++k) {
            const double g = static_cast<double>(a.f32(plane + k)) * 255.0;
            const double r = std::nearbyint(g);
            if (!(std::fabs(g - r) <= kPixelTol && r >= 0 && r <= 255))
                SF_FAIL(
                    "%s: sample %zu: channel %zu pixel (y %zu, x %zu) = %.9g is not k/255 for an integer k in "
                    "0..255 (not an 8-bit image)",
                    files.image.c_str(), i, ch, k / spec.width, k % spec.width, g / 255.0);
            out[k * pc + ch] = static_cast<uint8_t>(r);
        }
    }
}

// The mask channel must be 0/1 with its ones forming one axis-aligned rectangle.
void SiderBatch::Impl::decode_rect(size_t i, Label* l) const {
    const NpyArray& a = image.array();
    const size_t H = static_cast<size_t>(spec.height), W = static_cast<size_t>(spec.width);
    const size_t plane = (i * c + c - 1) * H * W;
    size_t x0 = W, y0 = H, x1 = 0, y1 = 0, ones = 0;
    for (size_t y = 0; y < H; ++y)
        for (size_t x = 0; x < W; ++x) {
            const float v = a.f32(plane + y * W + x);
            if (v == 1.0f) {
                ++ones;
                x0 = std::min(x0, x), y0 = std::min(y0, y), x1 = std::max(x1, x + 1), y1 = std::max(y1, y + 1);
            } else if (v != 0.0f) {
                SF_FAIL("%s: sample %zu: mask (channel %zu) value %.9g at (y %zu, x %zu), expected 0 or 1",
                        files.image.c_str(), i, c - 1, static_cast<double>(v), y, x);
            }
        }
    SF_CHECK(ones > 0, "%s: sample %zu: mask (channel %zu) is all zero: no valid pixels", files.image.c_str(), i,
             c - 1);
    SF_CHECK(ones == (x1 - x0) * (y1 - y0),
             "%s: sample %zu: mask (channel %zu) is not a rectangle (%zu ones in its bounding box x [%zu, %zu) y [%zu, "
             "%zu))",
             files.image.c_str(), i, c - 1, ones, x0, x1, y0, y1);
    if (!rects.empty()) {
        const auto& r = rects[i];
        SF_CHECK(r[0] == x0 && r[1] == y0 && r[2] == x1 && r[3] == y1,
                 "%s: sample %zu: transform_params give the valid rectangle x [%g, %g) y [%g, %g), the mask in %s "
                 "x [%zu, %zu) y [%zu, %zu)",
                 files.meta.c_str(), i, r[0], r[2], r[1], r[3], files.image.c_str(), x0, x1, y0, y1);
    }
    l->rect_x0 = static_cast<float>(x0), l->rect_y0 = static_cast<float>(y0);
    l->rect_x1 = static_cast<float>(x1), l->rect_y1 = static_cast<float>(y1);
}

// Object obj (0 gap, 1 slider): the heatmap's unique 1.0 cell plus the offset stored there.
void SiderBatch::Impl::decode_centre(size_t i, int obj, float* x, float* y) const {
    static const char* const kName[2] = {"gap", "slider"};
    const NpyArray& hm = heat.array();
    const NpyArray& of = off.array();
    const size_t cells = gh * gw, plane = (i * 2 + obj) * cells;
    size_t peak = 0, peaks = 0;
    float best = -1;
    for (size_t k = 0; k < cells; ++k) {
        const float v = hm.f32(plane + k);
        if (v == 1.0f) ++peaks, peak = k;
        if (!(v >= 0.0f && v <= 1.0f))
            SF_FAIL("%s: sample %zu: %s heatmap value %.9g outside [0, 1]", files.heatmaps.c_str(), i, kName[obj],
                    static_cast<double>(v));
        best = std::max(best, v);
    }
    SF_CHECK(peaks == 1,
             "%s: sample %zu: %s heatmap has %zu cells equal to 1.0 (maximum %.9g), expected exactly one peak",
             files.heatmaps.c_str(), i, kName[obj], peaks, static_cast<double>(best));
    const size_t u = peak % gw, v = peak / gw;
    const double du = of.f32(((i * 4) + 2 * obj) * cells + peak), dv = of.f32(((i * 4) + 2 * obj + 1) * cells + peak);
    SF_CHECK(std::fabs(du) <= kOffsetLimit && std::fabs(dv) <= kOffsetLimit,
             "%s: sample %zu: %s offset (%.9g, %.9g) at cell (u %zu, v %zu) outside [-0.5, 0.5]", files.offsets.c_str(),
             i, kName[obj], du, dv, u, v);
    if (!grid.empty()) {
        const double* g = &grid[i][2 * obj];
        const double* o = &offs[i][2 * obj];
        SF_CHECK(g[0] == u && g[1] == v, "%s: sample %zu: grid_coords.%s = [%g, %g], the heatmap peak is at [%zu, %zu]",
                 files.meta.c_str(), i, kName[obj], g[0], g[1], u, v);
        SF_CHECK(std::fabs(o[0] - du) <= kOffsetTol && std::fabs(o[1] - dv) <= kOffsetTol,
                 "%s: sample %zu: offsets_meta.%s = [%.9g, %.9g], the offsets file holds [%.9g, %.9g]",
                 files.meta.c_str(), i, kName[obj], o[0], o[1], du, dv);
    }
    *x = static_cast<float>(kStride * (static_cast<double>(u) + 0.5 + du));
    *y = static_cast<float>(kStride * (static_cast<double>(v) + 0.5 + dv));
}

Label SiderBatch::decode(size_t i, uint8_t* pixels) const {
    const Impl& m = *impl_;
    SF_CHECK(i < m.n, "%s: sample %zu out of range (the batch holds %zu)", m.files.image.c_str(), i, m.n);
    Label l;
    m.decode_pixels(i, pixels);
    m.decode_rect(i, &l);
    m.decode_centre(i, 0, &l.gap_x, &l.gap_y);
    m.decode_centre(i, 1, &l.slider_x, &l.slider_y);
    l.angle_rad = static_cast<float>(m.angles[i]);
    l.num_fakes = static_cast<int32_t>(m.fakes[i].size());
    for (size_t k = 0; k < m.fakes[i].size(); ++k) {
        // The original stored only the fake gap's cell int(x/4); its centre is taken as the cell centre.
        l.fake_x[k] = static_cast<float>(kStride * (m.fakes[i][k][0] + 0.5));
        l.fake_y[k] = static_cast<float>(kStride * (m.fakes[i][k][1] + 0.5));
    }
    validate_label(l, m.spec.height, m.spec.width, m.files.meta + ": sample " + std::to_string(i));
    return l;
}

}  // namespace data
