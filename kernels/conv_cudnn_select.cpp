// The device-free decisions of the cuDNN convolution plans (kernels/conv_cudnn.h): which engine
// configurations are finalized and timed (conv_select_candidates), the process-wide store of
// autotuning results (ConvPlanStore) and the cuDNN runtime version check. No cuDNN or CUDA calls:
// CPU tests drive them with synthetic engine lists, counting builders and injected versions.
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/conv_cudnn.h"
#include "runtime/error.h"
#include "runtime/hash.h"

namespace kern {

// ---- candidate selection ----

int conv_candidate_tier(const ConvCandidateInfo& c) { return (c.demoted ? 2 : 0) + (c.runtime_compiled ? 1 : 0); }

ConvCandidateChoice conv_select_candidates(const std::vector<ConvCandidateInfo>& list, bool deterministic,
                                           size_t max_workspace, int limit, const ConvFinalizeFn& finalize) {
    SF_CHECK(limit >= 1, "conv_select_candidates: limit must be >= 1, got %d", limit);
    ConvCandidateChoice out;
    std::vector<size_t> tiers[4];
    for (size_t i = 0; i < list.size(); ++i) {
        if (deterministic && list[i].nondeterministic) {
            ++out.nondeterministic;
            continue;
        }
        tiers[conv_candidate_tier(list[i])].push_back(i);
    }
    for (int t = 0; t < 4; ++t) {
        if (!out.kept.empty()) {  // an earlier tier produced plans: the rest is never finalized
            out.not_tried += static_cast<int>(tiers[t].size());
            continue;
        }
        for (size_t i : tiers[t]) {
            if (static_cast<int>(out.kept.size()) >= limit) break;
            size_t ws = 0;
            if (!finalize(i, &ws)) {
                ++out.refused;
            } else if (max_workspace && ws > max_workspace) {
                ++out.over_workspace;
            } else {
                out.kept.push_back(i);
                out.tier = t;
            }
        }
    }
    return out;
}

// ---- ConvPlanStore ----

namespace {

struct StoreKeyHash {
    size_t operator()(const ConvPlanStoreKey& k) const {
        uint64_t h = ConvPlanKeyHash()(k.plan);
        h = rt::mix64(h + rt::kGoldenGamma + static_cast<uint64_t>(k.device));
        h = rt::mix64(h + rt::kGoldenGamma + static_cast<uint64_t>(k.cudnn_version));
        return static_cast<size_t>(h);
    }
};

}  // namespace

struct ConvPlanStore::Impl {
    mutable std::mutex mu;
    std::unordered_map<ConvPlanStoreKey, ConvPlanChoice, StoreKeyHash> map;
    size_t builds = 0, hits = 0;
};

ConvPlanStore::ConvPlanStore() : impl_(std::make_unique<Impl>()) {}
ConvPlanStore::~ConvPlanStore() = default;

ConvPlanChoice ConvPlanStore::get_or_build(const ConvPlanStoreKey& key, const Builder& builder, bool* built) {
    // Held while building: plan time is single-threaded, and two networks building the same key at
    // once would autotune it twice.
    std::lock_guard<std::mutex> lock(impl_->mu);
    const auto it = impl_->map.find(key);
    if (it != impl_->map.end()) {
        ++impl_->hits;
        if (built) *built = false;
        return it->second;
    }
    ConvPlanChoice c = builder();  // throws: nothing stored
    impl_->map.emplace(key, c);
    ++impl_->builds;
    if (built) *built = true;
    return c;
}

void ConvPlanStore::put(const ConvPlanStoreKey& key, const ConvPlanChoice& choice) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->map[key] = choice;
}

size_t ConvPlanStore::size() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->map.size();
}

size_t ConvPlanStore::builds() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->builds;
}

size_t ConvPlanStore::hits() const {
    std::lock_guard<std::mutex> lock(impl_->mu);
    return impl_->hits;
}

void ConvPlanStore::clear() {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->map.clear();
    impl_->builds = impl_->hits = 0;
}

ConvPlanStore& ConvPlanStore::process() {
    static ConvPlanStore store;
    return store;
}

// ---- the cuDNN runtime ----

bool cudnn_runtime_ok(size_t runtime, size_t compiled, std::string* why, std::string* warning) {
    auto name = [](size_t v) {  // cuDNN 9: major*10000 + minor*100 + patch; cuDNN <= 8: major*1000 + ...
        return v < 10000 ? rt::format("%zu.%zu.%zu", v / 1000, v / 100 % 10, v % 100)
                         : rt::format("%zu.%zu.%zu", v / 10000, v / 100 % 100, v % 100);
    };
    std::string w, reason;
    if (runtime / 10000 != compiled / 10000)
        reason = rt::format(
            "the cuDNN library loaded is %s, but slidefuse was built against cuDNN %s: install cuDNN %zu "
            "(libcudnn.so.%zu, >= %s) or put its lib folder on LD_LIBRARY_PATH",
            name(runtime).c_str(), name(compiled).c_str(), compiled / 10000, compiled / 10000,
            name(kCudnnMinRuntime).c_str());
    else if (runtime < kCudnnMinRuntime)
        reason =
            rt::format("the cuDNN library loaded is %s, older than the %s the backend needs: install a newer cuDNN 9",
                       name(runtime).c_str(), name(kCudnnMinRuntime).c_str());
    else if (runtime < compiled)
        w = rt::format(
            "the cuDNN library loaded (%s) is older than the headers built against (%s); cuDNN promises "
            "compatibility towards newer runtimes only: if a plan fails, install cuDNN >= %s",
            name(runtime).c_str(), name(compiled).c_str(), name(compiled).c_str());
    if (why) *why = reason;
    if (warning) *warning = w;
    return reason.empty();
}

}  // namespace kern
