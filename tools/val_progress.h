// A BatchSource that reports progress while a backend takes its batches: validation inside
// training shows "validation batch k/n" (tools/progress.h CountProgress) instead of a silent
// minute. Everything else is forwarded to the wrapped source.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tools/progress.h"
#include "tools/train_data.h"

namespace tools {

class ProgressSource : public BatchSource {
public:
    // One pass: `what` k/n with n = inner.batches_per_epoch(). tty: live line (else periodic lines).
    ProgressSource(BatchSource& inner, const std::string& what, bool tty);
    ~ProgressSource() override;

    int next(float* input, std::vector<data::Label>& labels) override;
    uint64_t batches_per_epoch() const override { return inner_.batches_per_epoch(); }
    data::Cursor cursor() const override { return inner_.cursor(); }
    void seek(const data::Cursor& c) override { inner_.seek(c); }
    uint64_t samples() const override { return inner_.samples(); }
    std::string describe() const override { return inner_.describe(); }
    const data::HostBatch* next_raw() override;
    void release_raw() override { inner_.release_raw(); }

private:
    BatchSource& inner_;
    CountProgress progress_;
    uint64_t taken_ = 0;
};

bool stdout_is_tty();

}  // namespace tools
