// Sider NPY dataset listing and conversion to shards (see sider_import.h, docs/FORMAT.md).
// Conversion runs in two passes: every batch of every chosen split is opened and validated first
// (cheap: NPY headers and the meta JSON), so structural problems stop the run before anything is
// written; the second pass decodes and writes. Whatever the second pass created is removed if it
// fails.
#include "data/sider_import.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "runtime/error.h"
#include "runtime/log.h"

namespace data {

namespace fs = std::filesystem;

namespace {

const char* const kSplits[] = {"train", "val", "test"};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "{split}_NNNN" with at least one digit and at most 9 -> batch id; -1 otherwise.
int64_t batch_id_of(const std::string& stem, const std::string& split) {
    const std::string pre = split + "_";
    if (stem.size() <= pre.size() || stem.size() > pre.size() + 9 || stem.compare(0, pre.size(), pre) != 0) return -1;
    int64_t id = 0;
    for (size_t k = pre.size(); k < stem.size(); ++k) {
        if (stem[k] < '0' || stem[k] > '9') return -1;
        id = id * 10 + (stem[k] - '0');
    }
    return id;
}

std::vector<fs::directory_entry> entries_of(const fs::path& dir) {
    std::error_code ec;
    std::vector<fs::directory_entry> out;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) out.push_back(*it);
    SF_CHECK(!ec, "%s: cannot list: %s", dir.string().c_str(), ec.message().c_str());
    return out;
}

}  // namespace

std::vector<SiderFileSet> list_sider_split(const std::string& in_dir, const std::string& split) {
    const fs::path img_dir = fs::path(in_dir) / "images" / split, lab_dir = fs::path(in_dir) / "labels" / split;
    for (const fs::path& d : {img_dir, lab_dir})
        SF_CHECK(fs::is_directory(d),
                 "%s: no such directory (expected the original's processed dataset: "
                 "images/{split}/ and labels/{split}/)",
                 d.string().c_str());
    std::map<std::string, SiderFileSet> sets;  // by image stem
    for (const auto& e : entries_of(img_dir)) {
        const std::string name = e.path().filename().string();
        const std::string stem = ends_with(name, ".npy") ? name.substr(0, name.size() - 4) : "";
        const int64_t id = batch_id_of(stem, split);
        SF_CHECK(id >= 0 && e.is_regular_file(), "%s: unexpected entry in %s (expected only %s_NNNN.npy files)",
                 e.path().string().c_str(), img_dir.string().c_str(), split.c_str());
        SiderFileSet& s = sets[stem];
        s.split = split;
        s.batch_id = id;
        s.image = e.path().string();
    }
    for (const auto& e : entries_of(lab_dir)) {
        const std::string name = e.path().filename().string();
        const std::string p = e.path().string();
        if (name == split + "_index.json") continue;  // the original's per-split index, not needed
        std::string stem, kind;
        for (const char* suffix : {"_heatmaps.npy", "_offsets.npy", "_meta.json", "_weights.npy"})
            if (ends_with(name, suffix)) stem = name.substr(0, name.size() - std::strlen(suffix)), kind = suffix;
        SF_CHECK(!stem.empty() && batch_id_of(stem, split) >= 0 && e.is_regular_file(),
                 "%s: unexpected entry in %s (expected %s_NNNN_{heatmaps.npy,offsets.npy,meta.json})", p.c_str(),
                 lab_dir.string().c_str(), split.c_str());
        auto it = sets.find(stem);
        SF_CHECK(it != sets.end(), "%s: no matching image %s", p.c_str(), (img_dir / (stem + ".npy")).string().c_str());
        if (kind == "_heatmaps.npy") it->second.heatmaps = p;
        if (kind == "_offsets.npy") it->second.offsets = p;
        if (kind == "_meta.json") it->second.meta = p;
        // "_weights.npy": written by early preprocessor versions; the mask channel replaced it.
    }
    std::vector<SiderFileSet> out;
    for (auto& kv : sets) {
        const SiderFileSet& s = kv.second;
        const std::string missing = s.heatmaps.empty()  ? "_heatmaps.npy"
                                    : s.offsets.empty() ? "_offsets.npy"
                                    : s.meta.empty()    ? "_meta.json"
                                                        : "";
        SF_CHECK(missing.empty(), "%s: missing (the labels of %s)", (lab_dir / (kv.first + missing)).string().c_str(),
                 s.image.c_str());
        out.push_back(s);
    }
    std::sort(out.begin(), out.end(), [](const SiderFileSet& a, const SiderFileSet& b) {
        return a.batch_id != b.batch_id ? a.batch_id < b.batch_id : a.image < b.image;
    });
    return out;
}

namespace {

struct SplitPlan {
    std::string split;
    std::vector<SiderFileSet> files;
    ShardSpec spec;
    size_t samples = 0;
};

// The splits to look at: the named one, or for "all" those with an images/ or labels/ folder.
std::vector<std::string> choose_splits(const SiderConvertOptions& opt) {
    std::vector<std::string> splits;
    if (opt.split != "all") return {opt.split};
    for (const char* s : kSplits) {
        const bool img = fs::exists(fs::path(opt.in_dir) / "images" / s);
        const bool lab = fs::exists(fs::path(opt.in_dir) / "labels" / s);
        if (img || lab) splits.push_back(s);
    }
    SF_CHECK(!splits.empty(), "%s: no data found (expected images/{train,val,test}/ and labels/{train,val,test}/)",
             opt.in_dir.c_str());
    return splits;
}

// Pass 1: list and open every batch; one spec per split.
std::vector<SplitPlan> plan(const SiderConvertOptions& opt, const std::vector<std::string>& splits) {
    std::vector<SplitPlan> plans;
    for (const std::string& s : splits) {
        SplitPlan p;
        p.split = s;
        p.files = list_sider_split(opt.in_dir, s);
        if (p.files.empty()) {
            SF_CHECK(opt.split == "all", "%s: holds no %s_NNNN.npy files",
                     (fs::path(opt.in_dir) / "images" / s).string().c_str(), s.c_str());
            SF_LOG_INFO("convert: split '%s' has no files, skipped", s.c_str());
            continue;
        }
        for (size_t k = 0; k < p.files.size(); ++k) {
            const SiderBatch b(p.files[k]);
            if (k == 0) p.spec = b.spec();
            SF_CHECK(b.spec() == p.spec, "%s: %dx%d with %d pixel channel(s), but %s is %dx%d with %d",
                     p.files[k].image.c_str(), b.spec().width, b.spec().height, b.spec().channels,
                     p.files[0].image.c_str(), p.spec.width, p.spec.height, p.spec.channels);
            p.samples += b.count();
        }
        p.spec.quant4 = opt.quant4;
        SF_LOG_INFO("convert: %s: %zu batch files, %zu samples, %dx%d %s", s.c_str(), p.files.size(), p.samples,
                    p.spec.width, p.spec.height, p.spec.channels == 1 ? "gray" : "RGB");
        plans.push_back(std::move(p));
    }
    SF_CHECK(!plans.empty(), "%s: no data found (expected images/{train,val,test}/ and labels/{train,val,test}/)",
             opt.in_dir.c_str());
    return plans;
}

// What pass 2 created, removed again on failure.
struct Created {
    std::vector<std::string> files, dirs;
    void undo() noexcept {
        std::error_code ec;
        for (auto it = files.rbegin(); it != files.rend(); ++it) fs::remove(*it, ec);
        for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) fs::remove(*it, ec);  // only if empty
    }
};

void make_dir(const fs::path& d, Created* created) {
    std::error_code ec;
    if (fs::is_directory(d)) return;
    if (d.has_parent_path() && d.parent_path() != d) make_dir(d.parent_path(), created);
    SF_CHECK(fs::create_directory(d, ec) || fs::is_directory(d), "%s: cannot create directory: %s", d.string().c_str(),
             ec.message().c_str());
    created->dirs.push_back(d.string());
}

// Refuses output split folders that already hold shards (checked before the long validation pass).
void check_output_free(const std::string& out_dir, const std::vector<std::string>& splits) {
    for (const std::string& split : splits) {
        const fs::path d = fs::path(out_dir) / split;
        if (!fs::is_directory(d)) continue;
        for (const auto& e : entries_of(d)) {
            const std::string name = e.path().filename().string();
            SF_CHECK(!ends_with(name, kShardExtension) && !ends_with(name, std::string(kShardExtension) + ".tmp"),
                     "%s: already holds shards (%s); remove them or choose another output directory",
                     d.string().c_str(), name.c_str());
        }
    }
}

// Pass 2 for one split: decode every sample in order into shards of opt.shard_size samples.
SiderSplitResult convert_split(const SplitPlan& p, const SiderConvertOptions& opt, Created* created, size_t* done,
                               size_t total_files) {
    const fs::path dir = fs::path(opt.out_dir) / p.split;
    make_dir(dir, created);
    SiderSplitResult r;
    r.split = p.split;
    r.spec = p.spec;
    std::vector<uint8_t> pixels(static_cast<size_t>(p.spec.height) * p.spec.width * p.spec.channels);
    std::unique_ptr<ShardWriter> w;  // destroyed unfinished on error: removes its temporary file
    auto close_shard = [&]() {
        w->finish();
        created->files.push_back(r.shards.back());
        w.reset();
    };
    for (const SiderFileSet& f : p.files) {
        const SiderBatch b(f);
        SF_CHECK(
            b.spec().height == p.spec.height && b.spec().width == p.spec.width && b.spec().channels == p.spec.channels,
            "%s: changed since it was validated", f.image.c_str());
        for (size_t i = 0; i < b.count(); ++i) {
            if (!w) {
                char name[64];
                std::snprintf(name, sizeof(name), "%s_%05zu%s", p.split.c_str(), r.shards.size(), kShardExtension);
                r.shards.push_back((dir / name).string());
                w = std::make_unique<ShardWriter>(r.shards.back(), p.spec);
            }
            const Label l = b.decode(i, pixels.data());
            w->add(pixels.data(), l);
            ++r.samples;
            if (w->count() == opt.shard_size) close_shard();
        }
        ++r.files;
        if (opt.progress) opt.progress(++*done, total_files, p.split);
    }
    if (w) close_shard();
    return r;
}

}  // namespace

std::vector<SiderSplitResult> convert_sider(const SiderConvertOptions& opt) {
    SF_CHECK(opt.split == "all" || opt.split == "train" || opt.split == "val" || opt.split == "test",
             "convert: split '%s' is not one of train, val, test, all", opt.split.c_str());
    SF_CHECK(opt.shard_size >= 1 && opt.shard_size <= (1u << 24), "convert: shard size %zu outside 1..%u",
             opt.shard_size, 1u << 24);
    SF_CHECK(fs::is_directory(opt.in_dir), "%s: no such directory", opt.in_dir.c_str());
    SF_CHECK(!opt.out_dir.empty(), "convert: no output directory given");
    const std::vector<std::string> splits = choose_splits(opt);
    check_output_free(opt.out_dir, splits);
    const std::vector<SplitPlan> plans = plan(opt, splits);

    size_t total_files = 0, done = 0;
    for (const SplitPlan& p : plans) total_files += p.files.size();
    Created created;
    std::vector<SiderSplitResult> results;
    try {
        for (const SplitPlan& p : plans) results.push_back(convert_split(p, opt, &created, &done, total_files));
    } catch (...) {
        created.undo();
        throw;
    }
    return results;
}

}  // namespace data
