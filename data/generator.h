// Synthetic slider-CAPTCHA generator (MODEL_SPEC §4.1, docs/GENERATOR.md): procedural
// photographic-looking backgrounds, knobbed puzzle pieces, a shaded gap, the slider piece at the
// left at the gap's height, small gap rotations, confusing fake gaps, the original's image-size
// mix and its letterbox onto the model canvas (§3.1). Every sample is a pure function of
// (seed, index): the same bytes whatever the thread count or order.
//
// Coordinates are continuous pixel coordinates (pixel i covers [i, i+1)), x right, y down; the
// letterbox maps them as x' = scale*x + pad_left, y' = scale*y + pad_top (§3.1).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/label.h"

namespace data {

// The original's confusion strategies; index % 100 picks one with the original's mix per
// background: none 30, rotation 10, perlin 5, highlight 10, confusing_gap 20, hollow_center 5,
// gap_edge_highlight 10, combined 10.
enum Strategy : int {
    kStrategyNone = 0,
    kStrategyRotation,
    kStrategyPerlin,
    kStrategyHighlight,
    kStrategyConfusingGap,
    kStrategyHollowCenter,
    kStrategyGapEdgeHighlight,
    kStrategyCombined,
    kStrategyCount
};
const char* strategy_name(int strategy);
int strategy_of_index(uint64_t index);

constexpr int kSamplesPerBackground = 100;  // like the original: 100 CAPTCHAs per picture

struct GenConfig {
    uint64_t seed = 0;
    int height = 256, width = 512;  // letterbox canvas
    int channels = 1;               // 1: gray (0.299R+0.587G+0.114B, rounded); 3: RGB
    bool quant4 = false;            // forwarded to the shard writer (it quantises); pixels stay 8-bit
};

// Puzzle-piece geometry in original-image pixels: a square body with a round knob centred on
// each side's midpoint (tab = knob out, blank = knob in), like the original's
// create_common_puzzle_piece. `size` spans the body plus room for tabs on both sides.
enum class Edge : int8_t { Flat = 0, Tab = 1, Blank = 2 };
struct PieceShape {
    float size = 0;                                                    // whole piece (46..64 for the true gap)
    float knob_ratio = 0.2f;                                           // knob radius / body side
    Edge edges[4] = {Edge::Flat, Edge::Flat, Edge::Flat, Edge::Flat};  // top, right, bottom, left
    float hollow = 0;                                                  // radius of a hollow centre (0 = solid)
    float angle_rad = 0;  // rotation, counter-clockwise as displayed (y down)
};
// Signed distance (px) from the point at offset (dx, dy) from the piece centre to the outline;
// negative inside. Exact near the outline (what the shading uses), a bound further away.
float piece_sdf(const PieceShape& p, float dx, float dy);
// Half the side of a square around the centre that contains the (rotated) piece.
float piece_extent(const PieceShape& p);

struct GenSample {
    std::vector<uint8_t> pixels;  // (height, width, channels) uint8 HWC letterbox canvas, padding 255
    Label label;                  // letterbox frame
    int bg_id = 0;                // index / 100
    int strategy = 0;             // Strategy
    int orig_w = 0, orig_h = 0;   // original image size before the letterbox
    // Geometry in the original image frame, for tests and previews.
    PieceShape piece;  // the gap's shape; the slider is the same shape unrotated
    float gap_x = 0, gap_y = 0, slider_x = 0, slider_y = 0;
    PieceShape fake_piece[kMaxFakeGaps];
    float fake_x[kMaxFakeGaps] = {}, fake_y[kMaxFakeGaps] = {};
    float scale = 1;  // letterbox: x' = scale*x + pad_left
    int pad_left = 0, pad_top = 0;
};

// Optional intermediate images for tests: original-size RGB (orig_h, orig_w, 3) uint8, before the
// gap/fakes/slider were drawn (clean) and after (final, what the letterbox resizes).
struct GenDebug {
    std::vector<uint8_t> clean, final;
};

// Throws rt::Error on an unusable config (canvas smaller than 64x32, channels not 1 or 3).
GenSample generate_sample(const GenConfig& cfg, uint64_t index, GenDebug* debug = nullptr);

// The original's 0.8/0.1/0.1 train/val/test split by background id with seed 42: backgrounds
// are taken in blocks of 10; a Fisher-Yates permutation of the block drawn from
// splitmix64(42, block) sends 8 to train, 1 to val, 1 to test. Exact fractions for every full
// block, independent of the dataset size.
enum class Split { Train = 0, Val = 1, Test = 2 };
Split split_of_background(int bg_id);
const char* split_name(Split s);

// Called from the calling thread about twice a second and once at the end.
using GenProgress = std::function<void(uint64_t done, uint64_t total, double elapsed_s)>;

struct DatasetSummary {
    uint64_t samples[3] = {0, 0, 0};  // per Split
    size_t shards[3] = {0, 0, 0};
    double seconds = 0;
};

// Writes samples 0..count-1 to out_dir/{train,val,test}/{split}_NNNNNN.sfshard, at most
// shard_size samples per shard, each shard in index order. Work unit = one shard; `threads`
// workers take shards in order of their first index, so the files are identical whatever the
// thread count. Refuses a split folder that already holds shards. Writes out_dir/manifest.json
// last (data/shard_manifest.h): a dataset without it is incomplete.
DatasetSummary generate_dataset(const GenConfig& cfg, uint64_t count, const std::string& out_dir, int threads,
                                size_t shard_size, const GenProgress& progress = {});
// The samples and shards per split generate_dataset(count, shard_size) would write (seconds 0).
DatasetSummary plan_dataset(uint64_t count, size_t shard_size);

// The preview sample indices: one per background, strategies spread (i*100 + 13*i % 100).
uint64_t preview_index(int i);
// A grid of letterbox canvases (cols per row, 4 px gaps) as RGB (out_h, out_w, 3) with the labels
// drawn: gap centre red cross, slider blue cross, fakes yellow crosses, the letterbox rect green,
// a magenta tick from the gap centre at 10x the gap angle (horizontal = unrotated), and
// `strategy` white dots in the tile's top-left corner.
std::vector<uint8_t> render_preview(const std::vector<GenSample>& samples, const GenConfig& cfg, int cols, int* out_w,
                                    int* out_h);

// ---- internals shared by data/generator_*.cpp (declared here so tests can reach them) ----
namespace gen {

// Counter-based RNG: splitmix64 over a key mixed from (seed, index, stream). Same key, same
// sequence, on any thread.
struct Rng {
    uint64_t s;
    Rng(uint64_t seed, uint64_t index, uint64_t stream);
    uint64_t next();
    double uniform();                      // [0, 1)
    double uniform(double lo, double hi);  // [lo, hi)
    int randint(int lo, int hi);           // [lo, hi] inclusive
};
uint64_t mix64(uint64_t x);

// Float RGB image, (h, w, 3) HWC, values in 0..255 (not clamped until conversion).
struct Image {
    int w = 0, h = 0;
    std::vector<float> rgb;
    float* at(int x, int y) { return &rgb[(static_cast<size_t>(y) * w + x) * 3]; }
    const float* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * w + x) * 3]; }
};

constexpr int kSourceW = 640, kSourceH = 320;  // background "photo" size, larger than any sample

// The background picture of (seed, bg_id) at kSourceW x kSourceH. Cached per thread (the last
// one), so a run of indices with one background synthesises it once.
const Image& background_source(uint64_t seed, int bg_id);
Image synthesize_background(uint64_t seed, int bg_id);

// Bilinear resize of the window [x0, x0+cw) x [y0, y0+ch) of src to (w, h), mirrored
// horizontally when flip.
Image crop_resize(const Image& src, double x0, double y0, double cw, double ch, int w, int h, bool flip);

// Value noise: a lattice of random values in [-1, 1] with the given cell size, smoothstep
// interpolated; `add` accumulates amp * noise into out (w*h floats, stride w).
void add_value_noise(std::vector<float>& out, int w, int h, double cell, float amp, Rng& rng);

// Puzzle pieces (generator_piece.cpp). A prepared piece holds the rotation's cos/sin and the
// body/knob sizes so the per-pixel distance needs only square roots.
struct PreparedPiece {
    float c = 1, s = 0, half = 0, knob = 0, hollow = 0;
    Edge edges[4] = {Edge::Flat, Edge::Flat, Edge::Flat, Edge::Flat};
};
PreparedPiece prepare_piece(const PieceShape& p);
float piece_sdf(const PreparedPiece& g, float dx, float dy);
PieceShape random_piece(Rng& r, float size);  // 1..4 knobs, knob ratio near the original's 0.2

// Gap shading: Dark = darkened interior, dark rim on the top-left wall and a lit rim on the
// bottom-right one (the original's apply_gap_lighting); Bright = the 'highlight' strategy
// (apply_gap_highlighting); EdgeHighlight = darkened interior with a white edge band
// ('gap_edge_highlight'). `strength` scales everything (fake gaps are fainter).
enum class GapMode { Dark, Bright, EdgeHighlight };
struct GapLook {
    GapMode mode = GapMode::Dark;
    float base = 40, edge = 40, directional = 15;  // 0..255 intensity units
    float rim_light = 60, rim_dark = 40, rim_width = 2.5f;
    float edge_opacity = 0.5f, edge_width = 4;  // EdgeHighlight white band
    float strength = 1;
};
GapLook random_gap_look(Rng& r, GapMode mode);
void draw_gap(Image& im, const PieceShape& p, float cx, float cy, const GapLook& look);

// The slider: the clean content under the gap (clean pixels shifted by shift_x), an optional
// value-noise texture ('perlin' strategy) and the original's white edge highlight, alpha
// composited unrotated at (sx, sy).
struct SliderLook {
    float edge_opacity = 0.7f, edge_width = 5, directional = 0.3f;
    float noise_amp = 0, noise_cell = 8;
};
SliderLook random_slider_look(Rng& r, bool perlin);
void draw_slider(Image& im, const Image& clean, const PieceShape& p, float sx, float sy, int shift_x,
                 const SliderLook& look, Rng& r);

}  // namespace gen
}  // namespace data
