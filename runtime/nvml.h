// NVML monitor: GPU power, utilisation, clocks and temperature read through the NVIDIA Management
// Library while a benchmark runs (`slidefuse bench`, docs/BENCH.md).
// NVML is loaded at run time with dlopen("libnvidia-ml.so.1"), and the few functions used are
// resolved by name with our own declarations: the build never needs nvml.h, and a machine without
// the driver's library runs the bench without power figures. Nothing here logs, and no NVML
// failure throws (no library, missing symbol, init error, unknown device, unsupported query): each
// becomes a reason string that the bench writes into its JSON. Only misuse of the sampler throws.
//
//   rt::Nvml nvml(info.pci_bus_id, info.ordinal);          // opens, initialises, picks the device
//   rt::NvmlSampler sampler(nvml.reader(), 50, nvml.reason());
//   sampler.start();  ... timed steps ...  rt::NvmlSummary s = sampler.stop();
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

namespace rt {

constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";

// One poll of the device. A field NVML could not read is NaN (has_throttle false for the bits).
struct NvmlSample {
    static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
    double power_w = kNone;        // board power draw (NVML averages it over ~1 s on recent GPUs)
    double power_limit_w = kNone;  // power-management limit in force
    double gpu_util_pct = kNone;   // NVML utilization.gpu: % of the last period with a kernel running
    double mem_util_pct = kNone;   // NVML utilization.memory: % of the last period with memory busy
    double sm_clock_mhz = kNone;
    double mem_clock_mhz = kNone;
    double temperature_c = kNone;
    uint64_t throttle_reasons = 0;  // NVML clocks-throttle/event-reason bits
    bool has_throttle = false;
};

// Mean/min/max of one field over the samples where it was readable (n == 0: all NaN).
struct FieldStats {
    int n = 0;
    double sum = 0;
    double min = NvmlSample::kNone, max = NvmlSample::kNone;
    void add(double v);
    double mean() const { return n > 0 ? sum / n : NvmlSample::kNone; }
};

// What a sampling window saw. available == false: reason says why (and every field is empty).
struct NvmlSummary {
    bool available = false;
    std::string reason;      // why unavailable; or the first read error of a window that still had samples
    int samples = 0;         // successful reads
    int failed_reads = 0;    // reads that returned an error
    double interval_ms = 0;  // polling interval asked for
    double window_s = 0;     // start() to stop()
    FieldStats power_w, power_limit_w, gpu_util_pct, mem_util_pct, sm_clock_mhz, mem_clock_mhz, temperature_c;
    uint64_t throttle_reasons_any = 0;  // OR of the bits seen in the window

    static NvmlSummary unavailable(const std::string& why);
};

// Library handle + initialised NVML + one selected device. Never throws.
class Nvml {
public:
    // pci_bus_id: the CUDA device's PCI id (cudaDeviceGetPCIBusId, e.g. "0000:65:00.0"), which
    // names the same board even when CUDA_VISIBLE_DEVICES reorders devices; when empty, `index` is
    // taken as NVML's own device index. `library` is replaceable so tests can name a missing or
    // wrong library.
    explicit Nvml(const std::string& pci_bus_id = "", int index = 0, const std::string& library = kNvmlLibrary);
    ~Nvml();
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    bool ok() const { return device_ != nullptr; }
    const std::string& reason() const { return reason_; }                  // empty when ok()
    const std::string& driver_version() const { return driver_version_; }  // "" when unknown
    const std::string& device_name() const { return device_name_; }

    // One poll. Returns false (with *why) only when no field at all could be read.
    bool read(NvmlSample* s, std::string* why) const;
    // A read function for NvmlSampler bound to this object (which must outlive the sampler); an
    // empty function when !ok().
    std::function<bool(NvmlSample*, std::string*)> reader() const;

private:
    struct Api;
    void open(const std::string& pci_bus_id, int index, const std::string& library);

    void* lib_ = nullptr;
    Api* api_ = nullptr;
    bool initialised_ = false;
    void* device_ = nullptr;  // nvmlDevice_t
    std::string reason_, driver_version_, device_name_;
};

// Polls a read function on its own thread every interval_ms between start() and stop() (a first
// sample at once, so a window shorter than the interval still has one). The read function is
// injectable so the statistics and the thread handling are testable without a GPU.
class NvmlSampler {
public:
    using ReadFn = std::function<bool(NvmlSample*, std::string*)>;

    // An empty `read` makes a sampler that reports NvmlSummary::unavailable(unavailable_reason).
    NvmlSampler(ReadFn read, int interval_ms, std::string unavailable_reason = "no NVML reader");
    ~NvmlSampler();  // stops the thread if still running
    NvmlSampler(const NvmlSampler&) = delete;
    NvmlSampler& operator=(const NvmlSampler&) = delete;

    void start();        // throws rt::Error if already running or interval_ms < 1
    NvmlSummary stop();  // joins the thread; returns the window's summary (no-op summary if not started)
    bool running() const { return thread_.joinable(); }

private:
    void loop();

    ReadFn read_;
    int interval_ms_;
    std::string unavailable_reason_;
    std::thread thread_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool stop_requested_ = false;
    NvmlSummary acc_;  // guarded by mu_ while the thread runs
    std::chrono::steady_clock::time_point t0_;
};

}  // namespace rt
