// Dataset manifests (data/shard_manifest.h, docs/FORMAT.md "Dataset manifest").
#include "data/shard_manifest.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "data/crc32.h"
#include "data/shard_format.h"
#include "data/shard_io.h"
#include "runtime/error.h"

namespace data {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const char* const kSplits[] = {"train", "val", "test"};

ManifestShard scan_shard(const std::string& path) {
    const ShardReader r(path);  // validates the header and the file size
    const MappedFile f(path);
    const shard_detail::Layout lay = shard_detail::layout_for(r.count(), stored_pixel_bytes(r.spec()));
    ManifestShard s;
    s.file = fs::path(path).filename().string();
    s.samples = r.count();
    s.bytes = f.size();
    s.records_crc = crc32(f.data() + lay.crcs_offset, 4 * r.count());
    return s;
}

std::vector<std::string> shards_in(const std::string& dir) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return {};
    std::vector<std::string> out;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == kShardExtension) out.push_back(it->path().string());
    std::sort(out.begin(), out.end());
    return out;
}

template <class T>
T field(const json& j, const char* key, const std::string& file) {
    SF_CHECK(j.is_object() && j.contains(key), "%s: key '%s' is missing (incomplete manifest)", file.c_str(), key);
    try {
        return j.at(key).get<T>();
    } catch (const std::exception& e) {
        SF_FAIL("%s: key '%s' has the wrong type: %s", file.c_str(), key, e.what());
    }
}

}  // namespace

uint64_t DatasetManifest::samples(const std::string& split) const {
    uint64_t n = 0;
    auto it = splits.find(split);
    if (it != splits.end())
        for (const ManifestShard& s : it->second) n += s.samples;
    return n;
}

std::string DatasetManifest::describe() const {
    std::string out = source;
    if (source == "synthetic")
        out += rt::format(", %llu samples (seed %llu)", static_cast<unsigned long long>(count),
                          static_cast<unsigned long long>(seed));
    out += rt::format(", %dx%d x%d%s:", spec.height, spec.width, spec.channels, spec.quant4 ? " quant4" : "");
    for (const char* s : kSplits) out += rt::format(" %s %llu", s, static_cast<unsigned long long>(samples(s)));
    return out;
}

DatasetManifest scan_dataset(const std::string& root, const std::string& source, uint64_t seed, uint64_t count) {
    DatasetManifest m;
    m.source = source;
    m.seed = seed;
    m.count = count;
    bool first = true;
    for (const char* split : kSplits) {
        for (const std::string& path : shards_in(root + "/" + split)) {
            const ShardReader r(path);
            SF_CHECK(first || r.spec() == m.spec, "%s: %dx%d x%d shard in a dataset of %dx%d x%d shards", path.c_str(),
                     r.spec().height, r.spec().width, r.spec().channels, m.spec.height, m.spec.width, m.spec.channels);
            m.spec = r.spec();
            first = false;
            m.splits[split].push_back(scan_shard(path));
        }
    }
    SF_CHECK(!first, "%s: no shards in train/, val/ or test/", root.c_str());
    return m;
}

void write_manifest(const std::string& root, const DatasetManifest& m) {
    json j = {{"format", "slidefuse-dataset"},
              {"version", kManifestVersion},
              {"source", m.source},
              {"seed", m.seed},
              {"count", m.count},
              {"height", m.spec.height},
              {"width", m.spec.width},
              {"channels", m.spec.channels},
              {"quant4", m.spec.quant4}};
    json splits = json::object();
    for (const auto& kv : m.splits) {
        json list = json::array();
        for (const ManifestShard& s : kv.second)
            list.push_back({{"file", s.file},
                            {"samples", s.samples},
                            {"bytes", s.bytes},
                            {"records_crc32", rt::format("%08x", s.records_crc)}});
        splits[kv.first] = {{"samples", m.samples(kv.first)}, {"shards", list}};
    }
    j["splits"] = splits;
    const std::string path = root + "/" + kManifestFile, tmp = path + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << j.dump(1) << "\n";
        f.flush();
        SF_CHECK(f.good(), "%s: write failed", tmp.c_str());
    }
    FILE* f = std::fopen(tmp.c_str(), "rb");
    const bool synced = f && ::fsync(::fileno(f)) == 0;
    if (f) std::fclose(f);
    SF_CHECK(synced && std::rename(tmp.c_str(), path.c_str()) == 0, "%s: cannot write: %s", path.c_str(),
             std::strerror(errno));
    fsync_dir(root);
}

bool has_manifest(const std::string& root) {
    std::error_code ec;
    return fs::is_regular_file(root + "/" + kManifestFile, ec);
}

DatasetManifest read_manifest(const std::string& root) {
    const std::string file = root + "/" + kManifestFile;
    std::ifstream in(file);
    SF_CHECK(in.good(), "%s: no dataset manifest (an incomplete dataset: its generate/convert did not finish)",
             file.c_str());
    std::stringstream text;
    text << in.rdbuf();
    const json j = json::parse(text.str(), nullptr, false);
    SF_CHECK(j.is_object(), "%s: not valid JSON (damaged manifest)", file.c_str());
    SF_CHECK(field<std::string>(j, "format", file) == "slidefuse-dataset", "%s: not a slidefuse dataset manifest",
             file.c_str());
    const int version = field<int>(j, "version", file);
    SF_CHECK(version == kManifestVersion, "%s: manifest version %d, this build reads version %d", file.c_str(), version,
             kManifestVersion);
    DatasetManifest m;
    m.source = field<std::string>(j, "source", file);
    m.seed = field<uint64_t>(j, "seed", file);
    m.count = field<uint64_t>(j, "count", file);
    m.spec.height = field<int>(j, "height", file);
    m.spec.width = field<int>(j, "width", file);
    m.spec.channels = field<int>(j, "channels", file);
    m.spec.quant4 = field<bool>(j, "quant4", file);
    const json splits = field<json>(j, "splits", file);
    SF_CHECK(splits.is_object(), "%s: 'splits' is not an object", file.c_str());
    for (auto it = splits.begin(); it != splits.end(); ++it) {
        const json shards = field<json>(it.value(), "shards", file);
        SF_CHECK(shards.is_array(), "%s: 'splits.%s.shards' is not a list", file.c_str(), it.key().c_str());
        for (const json& s : shards) {
            ManifestShard sh;
            sh.file = field<std::string>(s, "file", file);
            sh.samples = field<uint64_t>(s, "samples", file);
            sh.bytes = field<uint64_t>(s, "bytes", file);
            sh.records_crc =
                static_cast<uint32_t>(std::strtoul(field<std::string>(s, "records_crc32", file).c_str(), nullptr, 16));
            m.splits[it.key()].push_back(sh);
        }
    }
    return m;
}

void verify_split(const std::string& root, const DatasetManifest& m, const std::string& split) {
    const std::string dir = root + "/" + split, file = root + "/" + kManifestFile;
    std::set<std::string> listed;
    auto it = m.splits.find(split);
    if (it != m.splits.end()) {
        for (const ManifestShard& want : it->second) {
            const std::string path = dir + "/" + want.file;
            std::error_code ec;
            SF_CHECK(fs::is_regular_file(path, ec), "%s: missing (listed in %s): the dataset is incomplete",
                     path.c_str(), file.c_str());
            const ManifestShard got = scan_shard(path);
            SF_CHECK(got.samples == want.samples && got.bytes == want.bytes && got.records_crc == want.records_crc,
                     "%s: differs from %s (%llu samples, %llu bytes, records CRC %08x; the manifest says %llu, %llu, "
                     "%08x): the shard was changed or damaged after the dataset was written",
                     path.c_str(), file.c_str(), static_cast<unsigned long long>(got.samples),
                     static_cast<unsigned long long>(got.bytes), got.records_crc,
                     static_cast<unsigned long long>(want.samples), static_cast<unsigned long long>(want.bytes),
                     want.records_crc);
            listed.insert(want.file);
        }
    }
    for (const std::string& path : shards_in(dir))
        SF_CHECK(listed.count(fs::path(path).filename().string()),
                 "%s: not listed in %s (a shard from another dataset or run?)", path.c_str(), file.c_str());
}

uint64_t generate_stop_after_shards() {
    const char* e = std::getenv("SF_TEST_GENERATE_STOP_AFTER_SHARDS");
    return e ? std::strtoull(e, nullptr, 10) : 0;
}

}  // namespace data
