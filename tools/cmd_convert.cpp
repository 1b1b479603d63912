// `slidefuse convert`: the original Sider NPY dataset (MODEL_SPEC §4.2) -> compact shards
// (docs/FORMAT.md). Progress is reported per NPY batch file; a summary line per split at the end.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/shard_manifest.h"
#include "data/sider_import.h"
#include "runtime/error.h"
#include "tools/commands.h"
#include "tools/progress.h"

namespace tools {

namespace {

const char* kConvertUsage =
    "usage: slidefuse convert --in PROCESSED_DIR --out DIR [--split train|val|test|all] [--shard-size N] [--quant4]\n"
    "  --in DIR          the original's processed dataset (images/{split}/, labels/{split}/)\n"
    "  --out DIR         writes DIR/{split}/{split}_NNNNN.sfshard\n"
    "  --split S         train, val, test, or all (default: all splits that have files)\n"
    "  --shard-size N    samples per shard (default 4096)\n"
    "  --quant4          store 4-bit pixels (value & 0xF0, the original's bits_to_keep: 4), half the size\n";

size_t parse_size(const std::string& opt, const std::string& v) {
    size_t pos = 0;
    unsigned long long n = 0;
    try {
        n = std::stoull(v, &pos);
    } catch (const std::exception&) {
        pos = 0;
    }
    SF_CHECK(pos == v.size() && !v.empty() && v[0] != '-', "%s: '%s' is not a positive integer", opt.c_str(),
             v.c_str());
    return static_cast<size_t>(n);
}

}  // namespace

int cmd_convert(const std::vector<std::string>& args) {
    data::SiderConvertOptions opt;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--help" || a == "-h") {
            std::fputs(kConvertUsage, stdout);
            return 0;
        }
        if (a == "--quant4") {
            opt.quant4 = true;
            continue;
        }
        SF_CHECK(a == "--in" || a == "--out" || a == "--split" || a == "--shard-size", "unknown option '%s'\n%s",
                 a.c_str(), kConvertUsage);
        SF_CHECK(i + 1 < args.size(), "%s needs a value\n%s", a.c_str(), kConvertUsage);
        const std::string& v = args[++i];
        if (a == "--in") opt.in_dir = v;
        if (a == "--out") opt.out_dir = v;
        if (a == "--split") opt.split = v;
        if (a == "--shard-size") opt.shard_size = parse_size(a, v);
    }
    SF_CHECK(!opt.in_dir.empty() && !opt.out_dir.empty(), "convert needs --in and --out\n%s", kConvertUsage);

    std::unique_ptr<Progress> progress;
    opt.progress = [&](size_t done, size_t total, const std::string& split) {
        if (!progress) progress = std::make_unique<Progress>(static_cast<int64_t>(total));
        progress->update(static_cast<int64_t>(done), "NPY batch files converted (" + split + ")");
    };
    std::vector<data::SiderSplitResult> results;
    try {
        results = data::convert_sider(opt);
    } catch (...) {
        if (progress) progress->finish();  // end a live progress line before the error is printed
        throw;
    }
    if (progress) progress->finish();
    // Last: the dataset is complete (shards a killed conversion left are in no manifest: refused).
    data::write_manifest(opt.out_dir, data::scan_dataset(opt.out_dir, "sider", 0, 0));
    for (const auto& r : results)
        std::printf("%s: %zu files, %zu samples -> %zu shard(s) in %s/%s (%dx%d, %s%s)\n", r.split.c_str(), r.files,
                    r.samples, r.shards.size(), opt.out_dir.c_str(), r.split.c_str(), r.spec.width, r.spec.height,
                    r.spec.channels == 1 ? "gray" : "RGB", r.spec.quant4 ? ", 4-bit" : "");
    return 0;
}

}  // namespace tools
