// NVML through dlopen (runtime/nvml.h). The declarations below are ours, written from the NVML API
// reference: every function returns nvmlReturn_t (a C enum, int-sized, NVML_SUCCESS = 0), a device
// is an opaque pointer, enum arguments are passed as int. Only the *_v2 entry points that exist in
// every driver since R3xx are required; the rest are optional and a missing one leaves its field NaN.
#include "runtime/nvml.h"

#include <dlfcn.h>

#include <cmath>

#include "runtime/error.h"

namespace rt {

namespace {

using NvmlDevice = void*;  // nvmlDevice_t
struct NvmlUtilization {   // nvmlUtilization_t
    unsigned int gpu;
    unsigned int memory;
};
constexpr int kNvmlSuccess = 0;
constexpr int kClockSm = 1;           // NVML_CLOCK_SM
constexpr int kClockMem = 2;          // NVML_CLOCK_MEM
constexpr int kTempGpu = 0;           // NVML_TEMPERATURE_GPU
constexpr unsigned kNameBytes = 256;  // > NVML_DEVICE_NAME_V2_BUFFER_SIZE (96) and the driver-version size (80)

}  // namespace

// Resolved entry points (null when the library lacks an optional one).
struct Nvml::Api {
    int (*init)() = nullptr;                                    // nvmlInit_v2
    int (*shutdown)() = nullptr;                                // nvmlShutdown
    const char* (*error_string)(int) = nullptr;                 // nvmlErrorString
    int (*by_index)(unsigned, NvmlDevice*) = nullptr;           // nvmlDeviceGetHandleByIndex_v2
    int (*by_pci)(const char*, NvmlDevice*) = nullptr;          // nvmlDeviceGetHandleByPciBusId_v2
    int (*driver_version)(char*, unsigned) = nullptr;           // nvmlSystemGetDriverVersion
    int (*name)(NvmlDevice, char*, unsigned) = nullptr;         // nvmlDeviceGetName
    int (*power)(NvmlDevice, unsigned*) = nullptr;              // nvmlDeviceGetPowerUsage (mW)
    int (*power_limit)(NvmlDevice, unsigned*) = nullptr;        // nvmlDeviceGetEnforcedPowerLimit (mW)
    int (*util)(NvmlDevice, NvmlUtilization*) = nullptr;        // nvmlDeviceGetUtilizationRates
    int (*clock)(NvmlDevice, int, unsigned*) = nullptr;         // nvmlDeviceGetClockInfo (MHz)
    int (*temperature)(NvmlDevice, int, unsigned*) = nullptr;   // nvmlDeviceGetTemperature (C)
    int (*reasons)(NvmlDevice, unsigned long long*) = nullptr;  // ...ClocksEventReasons / ...ThrottleReasons

    std::string error(int code) const {
        const char* s = error_string ? error_string(code) : nullptr;
        return format("NVML error %d%s%s", code, s ? ": " : "", s ? s : "");
    }
};

namespace {

template <class F>
void resolve(void* lib, const char* name, F* fn) {
    *fn = reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

Nvml::Nvml(const std::string& pci_bus_id, int index, const std::string& library) {
    try {
        open(pci_bus_id, index, library);
    } catch (const std::exception& e) {  // only std::bad_alloc could get here; keep the promise
        reason_ = e.what();
        device_ = nullptr;
    }
}

void Nvml::open(const std::string& pci_bus_id, int index, const std::string& library) {
    dlerror();
    lib_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
        const char* e = dlerror();
        reason_ = format("NVML unavailable: dlopen(\"%s\") failed: %s", library.c_str(), e ? e : "unknown error");
        return;
    }
    api_ = new Api;
    resolve(lib_, "nvmlInit_v2", &api_->init);
    resolve(lib_, "nvmlShutdown", &api_->shutdown);
    resolve(lib_, "nvmlErrorString", &api_->error_string);
    resolve(lib_, "nvmlDeviceGetHandleByIndex_v2", &api_->by_index);
    resolve(lib_, "nvmlDeviceGetHandleByPciBusId_v2", &api_->by_pci);
    resolve(lib_, "nvmlSystemGetDriverVersion", &api_->driver_version);
    resolve(lib_, "nvmlDeviceGetName", &api_->name);
    resolve(lib_, "nvmlDeviceGetPowerUsage", &api_->power);
    resolve(lib_, "nvmlDeviceGetEnforcedPowerLimit", &api_->power_limit);
    resolve(lib_, "nvmlDeviceGetUtilizationRates", &api_->util);
    resolve(lib_, "nvmlDeviceGetClockInfo", &api_->clock);
    resolve(lib_, "nvmlDeviceGetTemperature", &api_->temperature);
    resolve(lib_, "nvmlDeviceGetCurrentClocksEventReasons", &api_->reasons);  // R535+ name
    if (!api_->reasons) resolve(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons", &api_->reasons);

    const char* missing = !api_->init       ? "nvmlInit_v2"
                          : !api_->shutdown ? "nvmlShutdown"
                          : !api_->by_index ? "nvmlDeviceGetHandleByIndex_v2"
                                            : nullptr;
    if (missing) {
        reason_ = format("NVML unavailable: %s not found in %s", missing, library.c_str());
        return;
    }
    const int rc = api_->init();
    if (rc != kNvmlSuccess) {
        reason_ = "NVML unavailable: nvmlInit_v2 failed: " + api_->error(rc);
        return;
    }
    initialised_ = true;

    char buf[kNameBytes] = {0};
    if (api_->driver_version && api_->driver_version(buf, kNameBytes) == kNvmlSuccess) driver_version_ = buf;

    NvmlDevice dev = nullptr;
    int drc = 0;
    if (!pci_bus_id.empty() && api_->by_pci) {
        drc = api_->by_pci(pci_bus_id.c_str(), &dev);
        if (drc != kNvmlSuccess) {
            reason_ = format("NVML: no device with PCI bus id %s: %s", pci_bus_id.c_str(), api_->error(drc).c_str());
            return;
        }
    } else {
        if (index < 0) {
            reason_ = format("NVML: invalid device index %d", index);
            return;
        }
        drc = api_->by_index(static_cast<unsigned>(index), &dev);
        if (drc != kNvmlSuccess) {
            reason_ = format("NVML: no device %d: %s", index, api_->error(drc).c_str());
            return;
        }
    }
    device_ = dev;
    buf[0] = 0;
    if (api_->name && api_->name(dev, buf, kNameBytes) == kNvmlSuccess) device_name_ = buf;
}

Nvml::~Nvml() {
    if (initialised_ && api_->shutdown) api_->shutdown();
    delete api_;
    if (lib_) dlclose(lib_);
}

bool Nvml::read(NvmlSample* s, std::string* why) const {
    *s = NvmlSample{};
    if (!ok()) {
        if (why) *why = reason_;
        return false;
    }
    int got = 0;
    std::string first_error;
    // Records one query's outcome: the first failure is kept for the caller.
    auto done = [&](const char* what, int rc) {
        if (rc == kNvmlSuccess) {
            ++got;
            return true;
        }
        if (first_error.empty()) first_error = format("%s: %s", what, api_->error(rc).c_str());
        return false;
    };
    unsigned v = 0;
    if (api_->power && done("power", api_->power(device_, &v))) s->power_w = v / 1000.0;
    if (api_->power_limit && done("power limit", api_->power_limit(device_, &v))) s->power_limit_w = v / 1000.0;
    NvmlUtilization u{};
    if (api_->util && done("utilization", api_->util(device_, &u))) {
        s->gpu_util_pct = u.gpu;
        s->mem_util_pct = u.memory;
    }
    if (api_->clock && done("SM clock", api_->clock(device_, kClockSm, &v))) s->sm_clock_mhz = v;
    if (api_->clock && done("memory clock", api_->clock(device_, kClockMem, &v))) s->mem_clock_mhz = v;
    if (api_->temperature && done("temperature", api_->temperature(device_, kTempGpu, &v))) s->temperature_c = v;
    unsigned long long bits = 0;
    if (api_->reasons && done("clock event reasons", api_->reasons(device_, &bits))) {
        s->throttle_reasons = bits;
        s->has_throttle = true;
    }
    if (got == 0 && why) *why = first_error.empty() ? "no NVML query available" : first_error;
    return got > 0;
}

std::function<bool(NvmlSample*, std::string*)> Nvml::reader() const {
    if (!ok()) return {};
    return [this](NvmlSample* s, std::string* why) { return read(s, why); };
}

// ---- statistics ----

void FieldStats::add(double v) {
    if (std::isnan(v)) return;
    if (n == 0 || v < min) min = v;
    if (n == 0 || v > max) max = v;
    sum += v;
    ++n;
}

NvmlSummary NvmlSummary::unavailable(const std::string& why) {
    NvmlSummary s;
    s.available = false;
    s.reason = why.empty() ? "NVML unavailable" : why;
    return s;
}

// ---- sampler ----

NvmlSampler::NvmlSampler(ReadFn read, int interval_ms, std::string unavailable_reason)
    : read_(std::move(read)), interval_ms_(interval_ms), unavailable_reason_(std::move(unavailable_reason)) {}

NvmlSampler::~NvmlSampler() {
    if (running()) stop();
}

void NvmlSampler::start() {
    SF_CHECK(!running(), "NvmlSampler::start: already running");
    SF_CHECK(interval_ms_ >= 1, "NvmlSampler: interval_ms must be >= 1, got %d", interval_ms_);
    acc_ = NvmlSummary{};
    acc_.interval_ms = interval_ms_;
    stop_requested_ = false;
    t0_ = std::chrono::steady_clock::now();
    if (read_) thread_ = std::thread([this] { loop(); });
}

void NvmlSampler::loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
        lock.unlock();
        NvmlSample s;
        std::string why;
        const bool ok = read_(&s, &why);
        lock.lock();
        if (ok) {
            ++acc_.samples;
            acc_.power_w.add(s.power_w);
            acc_.power_limit_w.add(s.power_limit_w);
            acc_.gpu_util_pct.add(s.gpu_util_pct);
            acc_.mem_util_pct.add(s.mem_util_pct);
            acc_.sm_clock_mhz.add(s.sm_clock_mhz);
            acc_.mem_clock_mhz.add(s.mem_clock_mhz);
            acc_.temperature_c.add(s.temperature_c);
            if (s.has_throttle) acc_.throttle_reasons_any |= s.throttle_reasons;
        } else {
            ++acc_.failed_reads;
            if (acc_.reason.empty()) acc_.reason = why.empty() ? "NVML read failed" : why;
        }
        if (cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [this] { return stop_requested_; })) return;
    }
}

NvmlSummary NvmlSampler::stop() {
    if (!read_) return NvmlSummary::unavailable(unavailable_reason_);
    if (!running()) return NvmlSummary::unavailable("NVML sampler was not started");
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_requested_ = true;
    }
    cv_.notify_all();
    thread_.join();
    NvmlSummary s = acc_;
    s.window_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    s.available = s.samples > 0;
    if (!s.available && s.reason.empty()) s.reason = "no NVML sample in the window";
    return s;
}

}  // namespace rt
