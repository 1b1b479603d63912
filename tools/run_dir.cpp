// Run folders, the checkpoint folder's owner file, writability checks (tools/run_dir.h).
#include "tools/run_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/checkpoint.h"
#include "runtime/error.h"
#include "runtime/log.h"

namespace tools {

namespace fs = std::filesystem;

namespace {

const char* kOwnerFile = "RUN";

// The absolute, normalised form of a folder path (it need not exist), for comparisons.
std::string absolute_path(const std::string& p) {
    std::error_code ec;
    const fs::path a = fs::weakly_canonical(fs::absolute(p, ec), ec);
    return (ec ? fs::absolute(p) : a).lexically_normal().string();
}

std::string read_owner(const std::string& file) {
    std::ifstream f(file);
    std::string line;
    std::getline(f, line);
    return line;
}

// Modification time of the newest step checkpoint in dir (false when it has none).
bool newest_checkpoint_time(const std::string& dir, fs::file_time_type* t) {
    const std::vector<std::string> all = model::list_checkpoints(dir);
    if (all.empty()) return false;
    std::error_code ec;
    *t = fs::last_write_time(all.back(), ec);
    return !ec;
}

// "<name>.tmp" (checkpoints, shards, manifests) or "<name>.tmp.<pid>" (config.resolved.yaml).
bool is_temp_name(const std::string& name) {
    const size_t at = name.rfind(".tmp");
    if (at == std::string::npos || at == 0) return false;
    const std::string rest = name.substr(at + 4);
    return rest.empty() ||
           (rest.size() > 1 && rest[0] == '.' && rest.find_first_not_of("0123456789", 1) == std::string::npos);
}

}  // namespace

std::string new_run_dir(const std::string& log_dir) {
    char buf[64];
    const std::time_t t = std::time(nullptr);
    std::strftime(buf, sizeof(buf), "run-%Y%m%d-%H%M%S", std::localtime(&t));
    std::error_code ec;
    fs::create_directories(log_dir, ec);
    SF_CHECK(!ec, "cannot create the log folder '%s' (logging.log_dir): %s", log_dir.c_str(), ec.message().c_str());
    for (int n = 1; n < 1000; ++n) {
        const std::string dir = log_dir + "/" + buf + (n == 1 ? "" : "-" + std::to_string(n));
        if (fs::create_directory(dir, ec)) return dir;  // false: taken (by an earlier or a concurrent run)
        SF_CHECK(!ec, "cannot create the run folder '%s': %s", dir.c_str(), ec.message().c_str());
    }
    SF_FAIL("cannot find a free run folder name for %s/%s", log_dir.c_str(), buf);
}

std::string checkpoint_dir(const TrainConfig& cfg, const std::string& out_dir) {
    return cfg.checkpoints.save_dir.empty() ? out_dir + "/checkpoints" : cfg.checkpoints.save_dir;
}

std::string resume_search_dir(const TrainConfig& cfg, const std::string& out_arg) {
    if (!cfg.checkpoints.save_dir.empty()) return cfg.checkpoints.save_dir;
    if (!out_arg.empty()) return out_arg + "/checkpoints";
    std::string best;
    fs::file_time_type best_t{};
    std::error_code ec;
    for (fs::directory_iterator it(cfg.logging.log_dir, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string dir = it->path().string() + "/checkpoints";
        fs::file_time_type t;
        if (newest_checkpoint_time(dir, &t) && (best.empty() || t > best_t)) {
            best = dir;
            best_t = t;
        }
    }
    return best;
}

void ensure_writable_dir(const std::string& dir, const char* what) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    SF_CHECK(!ec && fs::is_directory(dir), "cannot create the %s '%s': %s", what, dir.c_str(),
             ec ? ec.message().c_str() : "a file of that name exists");
    const std::string probe = dir + "/.write-test-" + std::to_string(::getpid()) + ".tmp";
    FILE* f = std::fopen(probe.c_str(), "wb");
    const int err = errno;
    if (f) {
        const bool ok = std::fputc('x', f) != EOF && std::fclose(f) == 0;
        std::remove(probe.c_str());
        if (ok) return;
    }
    SF_FAIL("the %s '%s' is not writable (%s): nothing was trained; fix its permissions or choose another folder", what,
            dir.c_str(), std::strerror(f ? EIO : err));
}

void remove_stale_temp_files(const std::string& dir) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path p = it->path();
        if (!is_temp_name(p.filename().string()) || !it->is_regular_file(ec)) continue;
        std::error_code rm;
        if (fs::remove(p, rm))
            SF_LOG_INFO("removed %s (left by an interrupted write)", p.c_str());
        else if (rm)
            SF_LOG_WARN("cannot remove %s (left by an interrupted write): %s", p.c_str(), rm.message().c_str());
    }
}

void truncate_metrics(const std::string& path, int64_t step) {
    std::ifstream in(path);
    if (!in.good()) return;
    std::string kept, line;
    while (std::getline(in, line)) {
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() <= step)
            kept += line + "\n";
    }
    in.close();
    const std::string tmp = path + ".tmp";
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    out.close();
    SF_CHECK(out.good() && std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rewrite %s", path.c_str());
}

void claim_checkpoint_dir(const std::string& ckpt_dir, const std::string& out_dir, const std::string& resumed_from) {
    const std::string file = ckpt_dir + "/" + kOwnerFile;
    const std::string me = absolute_path(out_dir);
    const std::string owner = fs::exists(file) ? read_owner(file) : "";
    const bool continues_here = !resumed_from.empty() &&
                                absolute_path(fs::path(resumed_from).parent_path().string()) == absolute_path(ckpt_dir);
    if (owner == me) return;
    if (!continues_here) {
        SF_CHECK(owner.empty(),
                 "the checkpoint folder '%s' belongs to the run in '%s' (%s); this run writes to '%s'. Two runs "
                 "never share a checkpoint folder: leave checkpoints.save_dir unset (each run then uses "
                 "<out>/checkpoints), or continue that run with --resume auto --out %s",
                 ckpt_dir.c_str(), owner.c_str(), file.c_str(), me.c_str(), owner.c_str());
        SF_CHECK(model::list_checkpoints(ckpt_dir).empty(),
                 "the checkpoint folder '%s' holds checkpoints of another run (and no %s owner file): choose another "
                 "checkpoints.save_dir, continue that run with --resume, or move them away",
                 ckpt_dir.c_str(), kOwnerFile);
    } else if (!owner.empty()) {
        SF_LOG_INFO("%s: continuing the run of '%s' (resumed from %s) with output folder '%s'", ckpt_dir.c_str(),
                    owner.c_str(), resumed_from.c_str(), me.c_str());
    }
    const std::string tmp = file + ".tmp";
    {
        std::ofstream f(tmp, std::ios::trunc);
        f << me << "\n";
        f.close();
        SF_CHECK(f.good(), "cannot write %s", tmp.c_str());
    }
    SF_CHECK(std::rename(tmp.c_str(), file.c_str()) == 0, "cannot write %s: %s", file.c_str(), std::strerror(errno));
}

}  // namespace tools
