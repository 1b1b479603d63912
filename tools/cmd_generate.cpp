// slidefuse generate: writes a synthetic dataset of slider CAPTCHAs (data/generator.h) as
// compact shards, and/or a PNG preview grid with the labels drawn.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "data/generator.h"
#include "data/png.h"
#include "runtime/error.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace tools {

namespace {

const char* kGenerateUsage =
    "usage: slidefuse generate --out DIR --count N [options]\n"
    "       slidefuse generate --preview PNG [--preview-count 16] [options]\n"
    "Writes samples 0..N-1 of the synthetic slider-CAPTCHA generator to DIR/{train,val,test}/*.sfshard\n"
    "(split 0.8/0.1/0.1 by background, 100 samples per background). Deterministic from --seed.\n"
    "options:\n"
    "  --out DIR            output folder (its split folders must hold no shards yet)\n"
    "  --count N            number of samples\n"
    "  --seed S             generator seed (default 0)\n"
    "  --threads T          worker threads (default: all cores)\n"
    "  --shard-size K       samples per shard (default 1024)\n"
    "  --height H           canvas height in pixels (default 256; train makes it model.input_height)\n"
    "  --width W            canvas width in pixels (default 512; train makes it model.input_width)\n"
    "  --channels 1|3       gray or RGB pixels (default 1)\n"
    "  --quant4             store 4-bit pixels (the original's bits_to_keep: 4)\n"
    "  --preview PNG        write a grid of samples with their labels drawn: gap red, slider blue,\n"
    "                       fakes yellow, letterbox rect green, 10x gap angle as a magenta tick\n"
    "  --preview-count M    samples in the preview (default 16, 4 per row)\n";

struct GenerateArgs {
    std::string out, preview;
    uint64_t count = 0, seed = 0;
    bool has_count = false;
    int threads = 0, channels = 1, preview_count = 16;
    int height = 256, width = 512;
    size_t shard_size = 1024;
    bool quant4 = false, help = false;
};

uint64_t parse_u64(const std::string& flag, const std::string& v, uint64_t lo, uint64_t hi) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long x = std::strtoull(v.c_str(), &end, 10);
    SF_CHECK(!v.empty() && v[0] != '-' && v[0] != '+' && end && *end == '\0' && errno == 0 && x >= lo && x <= hi,
             "%s: expected an integer in %llu..%llu, got '%s'", flag.c_str(), static_cast<unsigned long long>(lo),
             static_cast<unsigned long long>(hi), v.c_str());
    return x;
}

GenerateArgs parse_generate_args(const std::vector<std::string>& args) {
    GenerateArgs a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& f = args[i];
        if (f == "--help" || f == "-h") {
            a.help = true;
            continue;
        }
        if (f == "--quant4") {
            a.quant4 = true;
            continue;
        }
        SF_CHECK(f.rfind("--", 0) == 0, "generate: unexpected argument '%s'\n%s", f.c_str(), kGenerateUsage);
        SF_CHECK(i + 1 < args.size(), "generate: %s needs a value", f.c_str());
        const std::string& v = args[++i];
        if (f == "--out") {
            a.out = v;
        } else if (f == "--preview") {
            a.preview = v;
        } else if (f == "--count") {
            a.count = parse_u64(f, v, 1, 1ull << 40);
            a.has_count = true;
        } else if (f == "--seed") {
            a.seed = parse_u64(f, v, 0, UINT64_MAX);
        } else if (f == "--threads") {
            a.threads = static_cast<int>(parse_u64(f, v, 1, 1024));
        } else if (f == "--shard-size") {
            a.shard_size = parse_u64(f, v, 1, 1u << 24);
        } else if (f == "--height") {
            a.height = static_cast<int>(parse_u64(f, v, 32, 4096));
        } else if (f == "--width") {
            a.width = static_cast<int>(parse_u64(f, v, 64, 4096));
        } else if (f == "--channels") {
            SF_CHECK(v == "1" || v == "3", "--channels: expected 1 (gray) or 3 (RGB), got '%s'", v.c_str());
            a.channels = v == "1" ? 1 : 3;
        } else if (f == "--preview-count") {
            a.preview_count = static_cast<int>(parse_u64(f, v, 1, 256));
        } else {
            SF_FAIL("generate: unknown option '%s'\n%s", f.c_str(), kGenerateUsage);
        }
    }
    if (a.help) return a;
    SF_CHECK(!a.out.empty() || !a.preview.empty(),
             "generate: nothing to do: give --out DIR --count N and/or --preview PNG\n%s", kGenerateUsage);
    SF_CHECK(a.out.empty() || a.has_count, "generate: --out needs --count N");
    SF_CHECK(!a.out.empty() || !a.has_count, "generate: --count needs --out DIR");
    return a;
}

void write_preview(const data::GenConfig& cfg, const GenerateArgs& a) {
    std::vector<data::GenSample> samples;
    for (int i = 0; i < a.preview_count; ++i) samples.push_back(data::generate_sample(cfg, data::preview_index(i)));
    int w = 0, h = 0;
    const std::vector<uint8_t> rgb = data::render_preview(samples, cfg, 4, &w, &h);
    data::write_png(a.preview, rgb.data(), w, h, 3);
    std::printf("preview: %d samples -> %s (%dx%d)\n", a.preview_count, a.preview.c_str(), w, h);
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
    const GenerateArgs a = parse_generate_args(args);
    if (a.help) {
        std::fputs(kGenerateUsage, stdout);
        return 0;
    }
    data::GenConfig cfg;
    cfg.seed = a.seed;
    cfg.channels = a.channels;
    cfg.height = a.height;
    cfg.width = a.width;
    cfg.quant4 = a.quant4;
    if (!a.preview.empty()) write_preview(cfg, a);
    if (a.out.empty()) return 0;

    const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const bool tty = ::isatty(::fileno(stderr)) != 0;
    double last_line = -1e9;
    auto progress = [&](uint64_t done, uint64_t total, double s) {
        const bool final = done == total;
        if (!tty && !final && s - last_line < 10) return;  // plain lines every 10 s in logs
        last_line = s;
        const double rate = s > 0 ? static_cast<double>(done) / s : 0;
        const double eta = rate > 0 ? static_cast<double>(total - done) / rate : -1;
        std::fprintf(stderr, "%sgenerate: %llu/%llu samples | %.0f samples/s | elapsed %s ETA %s%s",
                     tty ? "\r\033[K" : "", static_cast<unsigned long long>(done),
                     static_cast<unsigned long long>(total), rate, format_duration(s).c_str(),
                     format_duration(eta).c_str(), tty && !final ? "" : "\n");
        std::fflush(stderr);
    };
    const data::DatasetSummary sum = data::generate_dataset(cfg, a.count, a.out, threads, a.shard_size, progress);
    for (int s = 0; s < 3; ++s)
        std::printf("%-5s %10llu samples in %zu shards\n", data::split_name(static_cast<data::Split>(s)),
                    static_cast<unsigned long long>(sum.samples[s]), sum.shards[s]);
    std::printf("generated %llu samples into %s in %s (%.0f samples/s, %d threads)\n",
                static_cast<unsigned long long>(a.count), a.out.c_str(), format_duration(sum.seconds).c_str(),
                sum.seconds > 0 ? static_cast<double>(a.count) / sum.seconds : 0.0, threads);
    return 0;
}

}  // namespace tools
