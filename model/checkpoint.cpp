// Checkpoint files (model/checkpoint.h, docs/CHECKPOINTS.md): the model's flat host ranges <->
// safetensors tensors under PyTorch state_dict keys, plus the run state as string metadata.
#include "model/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "data/crc32.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/safetensors.h"

namespace model {

namespace {

const std::string kOptM = "optimizer.exp_avg.";
const std::string kOptV = "optimizer.exp_avg_sq.";
const std::string kVersionKey = "slidefuse.version";
const std::string kKindKey = "slidefuse.kind";
const std::string kChecksumKey = "slidefuse.checksum";
const std::string kStoppedKey = "run.stopped_by_error";
constexpr size_t kMaxNamesInMessage = 5;

using Meta = std::map<std::string, std::string>;

// "crc32:<8 hex digits>" (docs/CHECKPOINTS.md "Checksum"): CRC-32 (zlib's) of every tensor's data
// bytes in ascending order of tensor name (the order of the file's data section), then of every
// metadata entry but this one as key, NUL, value, NUL in ascending key order.
std::string content_checksum(const rt::SafeTensors& st) {
    uint32_t crc = 0;
    for (const std::string& n : st.names()) {  // sorted
        const rt::TensorData& t = st.get(n);
        crc = data::crc32(t.bytes.data(), t.bytes.size(), crc);
    }
    const char nul = 0;
    for (const auto& kv : st.metadata()) {
        if (kv.first == kChecksumKey) continue;
        crc = data::crc32(kv.first.data(), kv.first.size(), crc);
        crc = data::crc32(&nul, 1, crc);
        crc = data::crc32(kv.second.data(), kv.second.size(), crc);
        crc = data::crc32(&nul, 1, crc);
    }
    return rt::format("crc32:%08x", crc);
}

// Seals a file's contents: the last metadata entry written.
void put_checksum(rt::SafeTensors& st) { st.metadata()[kChecksumKey] = content_checksum(st); }

void check_view(const CheckpointView& v) {
    SF_CHECK(v.table && v.master && v.buffers && v.counters, "checkpoint view lacks the table, weights or buffers");
    SF_CHECK((v.adam_m == nullptr) == (v.adam_v == nullptr),
             "checkpoint view: adam_m and adam_v must both be set or both null");
}

// ---- writing ----

std::string str(int64_t x) { return rt::format("%" PRId64, x); }
std::string str(uint64_t x) { return rt::format("%" PRIu64, x); }
std::string str(double x) { return rt::format("%.17g", x); }

void add_range(rt::SafeTensors& st, const std::string& key, const ParamInfo& p, const float* flat,
               std::vector<float>& tmp) {
    tmp.resize(p.numel);
    to_torch_layout(p, flat + p.offset, tmp.data());
    st.add(key, rt::DType::F32, p.torch_shape, tmp.data());
}

rt::SafeTensors tensors_of(const CheckpointView& v, bool optimizer, const std::string& kind) {
    rt::SafeTensors st;
    std::vector<float> tmp;
    for (const ParamInfo& p : v.table->params) {
        add_range(st, p.name, p, v.master, tmp);
        if (optimizer) {
            add_range(st, kOptM + p.name, p, v.adam_m, tmp);
            add_range(st, kOptV + p.name, p, v.adam_v, tmp);
        }
    }
    for (const BufferInfo& b : v.table->buffers) {
        if (b.counter)
            st.add(b.name, rt::DType::I64, {}, v.counters + b.offset);
        else
            st.add(b.name, rt::DType::F32, b.torch_shape, v.buffers + b.offset);
    }
    Meta& m = st.metadata();
    m["format"] = "pt";  // the safetensors convention for PyTorch state dicts
    m[kVersionKey] = std::to_string(kCheckpointVersion);
    m[kKindKey] = kind;
    m["model.parameters"] = std::to_string(v.table->num_parameters());
    return st;
}

// Makes a completed rename durable: fsync of the folder holding the file.
void sync_parent_dir(const std::string& path) {
    std::string dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;  // best effort: the file itself was fsynced before the rename
    (void)::fsync(fd);
    ::close(fd);
}

void put_run_state(Meta& m, const RunState& rs) {
    m["run.step"] = str(rs.step);
    m["run.adam_step"] = str(rs.adam_step);
    m["run.epoch"] = str(rs.epoch);
    m["run.skipped"] = str(rs.skipped);
    m["run.bad_streak"] = str(rs.bad_streak);
    m["run.seed"] = str(rs.seed);
    m["run.cursor_epoch"] = str(rs.cursor_epoch);
    m["run.cursor_batch"] = str(rs.cursor_batch);
    m["run.config_hash"] = rs.config_hash;
    m["run.best_metric"] = str(rs.best_metric);
    m["run.best_metric_name"] = rs.best_metric_name;
    m["run.epochs_without_improvement"] = str(rs.epochs_without_improvement);
    m["run.es_best"] = str(rs.es_best);
    m["run.guard_best"] = str(rs.guard_best);
    m["run.window_loss_sum"] = str(rs.window_loss_sum);
    m["run.window_steps"] = str(rs.window_steps);
    m["run.out_dir"] = rs.out_dir;
    if (!rs.stopped_by_error.empty()) m[kStoppedKey] = rs.stopped_by_error;
    if (!rs.config_yaml.empty()) m["run.config"] = rs.config_yaml;
    if (rs.world_size != 1) m["run.world_size"] = str(rs.world_size);
}

// ---- reading ----

const std::string& meta_str(const Meta& m, const std::string& key, const std::string& path) {
    auto it = m.find(key);
    SF_CHECK(it != m.end(), "%s: metadata '%s' is missing (incomplete run state)", path.c_str(), key.c_str());
    return it->second;
}

template <class T>
T meta_num(const Meta& m, const std::string& key, const std::string& path) {
    const std::string& s = meta_str(m, key, path);
    const char* b = s.c_str();
    char* end = nullptr;
    errno = 0;
    T v{};
    bool ok = !s.empty();
    if constexpr (std::is_same_v<T, double>) {
        v = std::strtod(b, &end);
        errno = 0;  // ERANGE for a subnormal value is no error: it round-trips exactly
    } else if constexpr (std::is_signed_v<T>) {
        v = static_cast<T>(std::strtoll(b, &end, 10));
    } else {
        ok = ok && s[0] != '-';  // strtoull would accept and negate it
        v = static_cast<T>(std::strtoull(b, &end, 10));
    }
    ok = ok && end == b + s.size() && errno == 0;
    SF_CHECK(ok, "%s: metadata '%s' = '%s' is not a valid %s", path.c_str(), key.c_str(), s.c_str(),
             std::is_same_v<T, double> ? "number" : "integer");
    return v;
}

RunState read_run_state(const Meta& m, const std::string& path) {
    RunState rs;
    rs.step = meta_num<int64_t>(m, "run.step", path);
    rs.adam_step = meta_num<int64_t>(m, "run.adam_step", path);
    rs.epoch = meta_num<int64_t>(m, "run.epoch", path);
    rs.skipped = meta_num<int64_t>(m, "run.skipped", path);
    rs.bad_streak = meta_num<int64_t>(m, "run.bad_streak", path);
    rs.seed = meta_num<uint64_t>(m, "run.seed", path);
    rs.cursor_epoch = meta_num<uint64_t>(m, "run.cursor_epoch", path);
    rs.cursor_batch = meta_num<uint64_t>(m, "run.cursor_batch", path);
    rs.config_hash = meta_str(m, "run.config_hash", path);
    rs.best_metric = meta_num<double>(m, "run.best_metric", path);
    rs.best_metric_name = meta_str(m, "run.best_metric_name", path);
    rs.epochs_without_improvement = meta_num<int64_t>(m, "run.epochs_without_improvement", path);
    rs.es_best = meta_num<double>(m, "run.es_best", path);
    rs.guard_best = meta_num<double>(m, "run.guard_best", path);
    rs.window_loss_sum = meta_num<double>(m, "run.window_loss_sum", path);
    rs.window_steps = meta_num<int64_t>(m, "run.window_steps", path);
    rs.out_dir = meta_str(m, "run.out_dir", path);
    // Optional keys (absent from checkpoints of normal steps, or written before they existed).
    if (m.count(kStoppedKey)) rs.stopped_by_error = m.at(kStoppedKey);
    if (m.count("run.config")) rs.config_yaml = m.at("run.config");
    if (m.count("run.world_size")) rs.world_size = meta_num<int64_t>(m, "run.world_size", path);
    SF_CHECK(rs.step >= 0 && rs.adam_step >= 0 && rs.skipped >= 0 && rs.adam_step + rs.skipped == rs.step &&
                 rs.epoch >= 0 && rs.bad_streak >= 0 && rs.bad_streak <= rs.skipped && rs.window_steps >= 0 &&
                 rs.epochs_without_improvement >= 0 && rs.world_size >= 1,
             "%s: inconsistent run state (step %" PRId64 ", adam_step %" PRId64 ", skipped %" PRId64
             ", bad_streak %" PRId64 ", epoch %" PRId64 ")",
             path.c_str(), rs.step, rs.adam_step, rs.skipped, rs.bad_streak, rs.epoch);
    return rs;
}

// Opens the file; a structural failure (rt::SafeTensors checks the header length, the JSON, every
// tensor's dtype, shape and byte range) becomes one error naming the file.
rt::SafeTensors open_file(const std::string& path) {
    std::error_code ec;
    SF_CHECK(std::filesystem::is_regular_file(path, ec), "%s: no such checkpoint file", path.c_str());
    try {
        return rt::SafeTensors::load(path);
    } catch (const std::exception& e) {
        SF_FAIL("%s: truncated or damaged file: %s", path.c_str(), e.what());
    }
}

// The kind of file ("checkpoint" | "weights"; "" for a foreign file without slidefuse metadata),
// after checking the format version.
std::string file_kind(const rt::SafeTensors& st, const std::string& path) {
    const Meta& m = st.metadata();
    if (m.find(kVersionKey) == m.end()) return "";
    const int64_t ver = meta_num<int64_t>(m, kVersionKey, path);
    SF_CHECK(ver == kCheckpointVersion, "%s: checkpoint format version %" PRId64 ", this build reads version %d",
             path.c_str(), ver, kCheckpointVersion);
    const std::string& kind = meta_str(m, kKindKey, path);
    SF_CHECK(kind == "checkpoint" || kind == "weights", "%s: unknown file kind '%s' (expected checkpoint or weights)",
             path.c_str(), kind.c_str());
    return kind;
}

// A slidefuse file's checksum must match its contents; a file written before checksums existed
// loads with a warning.
void verify_checksum(const rt::SafeTensors& st, const std::string& path) {
    auto it = st.metadata().find(kChecksumKey);
    if (it == st.metadata().end()) {
        SF_LOG_WARN("%s: no checksum ('%s'; written by an older slidefuse): its contents cannot be verified",
                    path.c_str(), kChecksumKey.c_str());
        return;
    }
    const std::string actual = content_checksum(st);
    SF_CHECK(it->second == actual,
             "%s: checksum mismatch (stored %s, contents give %s): the file is corrupt (damaged on disk or in a "
             "copy); use another checkpoint",
             path.c_str(), it->second.c_str(), actual.c_str());
}

bool ends_with(const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? "," : "") + std::to_string(s[i]);
    return out + "]";
}

std::string name_list(const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < kMaxNamesInMessage; ++i) out += (i ? ", '" : "'") + names[i] + "'";
    if (names.size() > kMaxNamesInMessage) out += rt::format(" and %zu more", names.size() - kMaxNamesInMessage);
    return out;
}

void check_tensor(const rt::SafeTensors& st, const std::string& key, rt::DType dtype, const std::vector<int64_t>& shape,
                  const std::string& path) {
    const rt::TensorData& t = st.get(key);
    SF_CHECK(t.dtype == dtype && t.shape == shape, "%s: tensor '%s' is %s %s, expected %s %s", path.c_str(),
             key.c_str(), rt::dtype_name(t.dtype), shape_str(t.shape).c_str(), rt::dtype_name(dtype),
             shape_str(shape).c_str());
}

// F32 data must be finite (and, for AdamW's second moment, >= 0: sqrt(v) follows).
void check_values(const rt::TensorData& t, const std::string& key, bool non_negative, const std::string& path) {
    const size_t n = t.numel();
    for (size_t i = 0; i < n; ++i) {
        float x;
        std::memcpy(&x, t.bytes.data() + 4 * i, 4);
        SF_CHECK(std::isfinite(x), "%s: tensor '%s' holds a non-finite value (%g at index %zu)", path.c_str(),
                 key.c_str(), static_cast<double>(x), i);
        SF_CHECK(!non_negative || x >= 0, "%s: tensor '%s' holds a negative value (%g at index %zu)", path.c_str(),
                 key.c_str(), static_cast<double>(x), i);
    }
}

// Every key of the table present with the right dtype/shape and finite values; nothing unknown.
// Returns whether the file holds (complete) optimizer state.
bool validate_tensors(const rt::SafeTensors& st, const ParamTable& table, const std::string& path) {
    std::set<std::string> expected;
    for (const ParamInfo& p : table.params) expected.insert(p.name);
    for (const BufferInfo& b : table.buffers) expected.insert(b.name);
    bool optimizer = false;
    std::vector<std::string> unknown, missing;
    for (const std::string& n : st.names()) {
        const bool opt = n.rfind(kOptM, 0) == 0 || n.rfind(kOptV, 0) == 0;
        optimizer = optimizer || opt;
        const std::string base = n.rfind(kOptV, 0) == 0   ? n.substr(kOptV.size())
                                 : n.rfind(kOptM, 0) == 0 ? n.substr(kOptM.size())
                                                          : n;
        if (opt ? table.find(base) == nullptr : expected.count(n) == 0) unknown.push_back(n);
    }
    SF_CHECK(unknown.empty(), "%s: %zu unknown tensor(s) (not in this model's state_dict): %s", path.c_str(),
             unknown.size(), name_list(unknown).c_str());
    for (const ParamInfo& p : table.params) {
        for (const std::string& k : {p.name, kOptM + p.name, kOptV + p.name})
            if ((k == p.name || optimizer) && !st.has(k)) missing.push_back(k);
    }
    for (const BufferInfo& b : table.buffers)
        if (!st.has(b.name)) missing.push_back(b.name);
    SF_CHECK(missing.empty(), "%s: %zu tensor(s) missing: %s", path.c_str(), missing.size(),
             name_list(missing).c_str());

    for (const ParamInfo& p : table.params) {
        check_tensor(st, p.name, rt::DType::F32, p.torch_shape, path);
        check_values(st.get(p.name), p.name, false, path);
        if (!optimizer) continue;
        check_tensor(st, kOptM + p.name, rt::DType::F32, p.torch_shape, path);
        check_tensor(st, kOptV + p.name, rt::DType::F32, p.torch_shape, path);
        check_values(st.get(kOptM + p.name), kOptM + p.name, false, path);
        check_values(st.get(kOptV + p.name), kOptV + p.name, true, path);
    }
    for (const BufferInfo& b : table.buffers) {
        if (b.counter) {
            check_tensor(st, b.name, rt::DType::I64, {}, path);
            int64_t c;
            std::memcpy(&c, st.get(b.name).bytes.data(), 8);
            SF_CHECK(c >= 0, "%s: tensor '%s' = %" PRId64 " is negative", path.c_str(), b.name.c_str(), c);
        } else {
            check_tensor(st, b.name, rt::DType::F32, b.torch_shape, path);
            check_values(st.get(b.name), b.name, ends_with(b.name, ".running_var"), path);
        }
    }
    return optimizer;
}

void copy_range(const rt::SafeTensors& st, const std::string& key, const ParamInfo& p, float* flat,
                std::vector<float>& tmp) {
    const rt::TensorData& t = st.get(key);
    tmp.resize(p.numel);
    std::memcpy(tmp.data(), t.bytes.data(), t.bytes.size());
    from_torch_layout(p, tmp.data(), flat + p.offset);
}

}  // namespace

void save_checkpoint(const std::string& path, const CheckpointView& v, const RunState& rs) {
    check_view(v);
    rt::SafeTensors st = tensors_of(v, v.adam_m != nullptr, "checkpoint");
    put_run_state(st.metadata(), rs);
    put_checksum(st);
    st.save(path);
    sync_parent_dir(path);
}

void export_weights(const std::string& path, const CheckpointView& v) {
    check_view(v);
    rt::SafeTensors st = tensors_of(v, false, "weights");
    put_checksum(st);
    st.save(path);
    sync_parent_dir(path);
}

void load_checkpoint(const std::string& path, const CheckpointView& v, RunState* rs) {
    check_view(v);
    const rt::SafeTensors st = open_file(path);
    const std::string kind = file_kind(st, path);
    const bool want_adam = v.adam_m != nullptr;
    SF_CHECK(!kind.empty() || (!want_adam && !rs),
             "%s: no slidefuse metadata ('%s'): not a slidefuse checkpoint; only weights can be read from it",
             path.c_str(), kVersionKey.c_str());
    SF_CHECK(!rs || kind == "checkpoint",
             "%s: a weight file (slidefuse export) holds no run state; resume needs a checkpoint", path.c_str());
    RunState state;
    if (rs) state = read_run_state(st.metadata(), path);
    const bool has_adam = validate_tensors(st, *v.table, path);
    SF_CHECK(!want_adam || has_adam,
             "%s: holds no optimizer state (AdamW exp_avg/exp_avg_sq); resume needs a checkpoint", path.c_str());
    if (!kind.empty()) verify_checksum(st, path);  // last: the checks above name a specific problem

    // Everything checked: copy.
    std::vector<float> tmp;
    for (const ParamInfo& p : v.table->params) {
        copy_range(st, p.name, p, v.master, tmp);
        if (!want_adam) continue;
        copy_range(st, kOptM + p.name, p, v.adam_m, tmp);
        copy_range(st, kOptV + p.name, p, v.adam_v, tmp);
    }
    for (const BufferInfo& b : v.table->buffers) {
        const rt::TensorData& t = st.get(b.name);
        std::memcpy(b.counter ? static_cast<void*>(v.counters + b.offset) : static_cast<void*>(v.buffers + b.offset),
                    t.bytes.data(), t.bytes.size());
    }
    if (rs) *rs = state;
}

int checkpoint_input_channels(const std::string& path) {
    const rt::SafeTensors st = open_file(path);
    const std::string key = "stem.conv1.conv.weight";
    SF_CHECK(st.has(key), "%s: no tensor '%s': not a checkpoint of this model", path.c_str(), key.c_str());
    const rt::TensorData& t = st.get(key);
    SF_CHECK(t.shape.size() == 4 && (t.shape[1] == 2 || t.shape[1] == 4),
             "%s: '%s' has shape %s, expected [32,2|4,3,3]", path.c_str(), key.c_str(), shape_str(t.shape).c_str());
    return static_cast<int>(t.shape[1]);
}

// ---- the checkpoint folder ----

std::string checkpoint_path(const std::string& dir, int64_t step) {
    SF_CHECK(step >= 0, "checkpoint step %" PRId64 " is negative", step);
    return dir + rt::format("/ckpt-%08" PRId64 ".safetensors", step);
}

std::string best_checkpoint_path(const std::string& dir) { return dir + "/best.safetensors"; }

std::vector<std::string> list_checkpoints(const std::string& dir) {
    const std::string prefix = "ckpt-", suffix = ".safetensors";
    std::vector<std::pair<int64_t, std::string>> found;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 || !ends_with(name, suffix))
            continue;
        const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
        if (digits.size() > 18 ||
            !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
            continue;
        if (!it->is_regular_file(ec)) continue;
        found.emplace_back(std::strtoll(digits.c_str(), nullptr, 10), dir + "/" + name);
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> out;
    for (auto& f : found) out.push_back(std::move(f.second));
    return out;
}

void prune_checkpoints(const std::string& dir, int keep_last) {
    SF_CHECK(keep_last >= 1, "keep_last must be >= 1, got %d", keep_last);
    const std::vector<std::string> all = list_checkpoints(dir);
    for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i) {
        std::error_code ec;
        std::filesystem::remove(all[i], ec);
        if (ec) SF_LOG_WARN("cannot delete old checkpoint %s: %s", all[i].c_str(), ec.message().c_str());
    }
}

std::string latest_checkpoint(const std::string& dir) {
    const std::vector<std::string> all = list_checkpoints(dir);
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        try {
            const rt::SafeTensors st = open_file(*it);
            SF_CHECK(file_kind(st, *it) == "checkpoint", "%s: not a slidefuse checkpoint", it->c_str());
            read_run_state(st.metadata(), *it);
            verify_checksum(st, *it);
            return *it;
        } catch (const rt::Error& e) {
            SF_LOG_WARN("skipping checkpoint %s: %s", it->c_str(), e.message().c_str());
        }
    }
    return "";
}

}  // namespace model
