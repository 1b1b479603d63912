#include "tools/val_progress.h"

#include <unistd.h>

#include <cstdio>

namespace tools {

bool stdout_is_tty() { return ::isatty(::fileno(stdout)) != 0; }

ProgressSource::ProgressSource(BatchSource& inner, const std::string& what, bool tty)
    : inner_(inner), progress_(what, inner.batches_per_epoch(), tty) {}

ProgressSource::~ProgressSource() { progress_.finish(); }

int ProgressSource::next(float* input, std::vector<data::Label>& labels) {
    const int n = inner_.next(input, labels);
    progress_.tick(++taken_);
    return n;
}

const data::HostBatch* ProgressSource::next_raw() {
    const data::HostBatch* b = inner_.next_raw();
    if (b) progress_.tick(++taken_);
    return b;
}

}  // namespace tools
