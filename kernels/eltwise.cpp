// Backend dispatch for the element-wise helpers and the FPN fusion (eltwise.h): CPU runs the fp32
// reference; on CUDA only fill has a kernel so far (fill.cu).
#include "kernels/eltwise.h"

#include "kernels/fill_cuda.h"
#include "runtime/error.h"

namespace kern {

void add(const rt::Exec& ex, size_t n, const float* a, const float* b, float* y) {
    if (ex.is_cuda()) SF_FAIL("add: CUDA backend not implemented yet");
    add_ref(n, a, b, y);
}

void accumulate(const rt::Exec& ex, size_t n, const float* x, float* y, bool accumulate) {
    if (ex.is_cuda()) SF_FAIL("accumulate: CUDA backend not implemented yet");
    accumulate_ref(n, x, y, accumulate);
}

void fill(const rt::Exec& ex, size_t n, float value, float* y) {
    if (ex.is_cuda()) {
        fill_cuda(ex, n, value, y);
        return;
    }
    fill_ref(n, value, y);
}

void fusion_forward(const rt::Exec& ex, size_t n, const float* a, const float* b, const float* wa, const float* wb,
                    float* y) {
    if (ex.is_cuda()) SF_FAIL("fusion_forward: CUDA backend not implemented yet");
    fusion_forward_ref(n, a, b, wa, wb, y);
}

void fusion_backward(const rt::Exec& ex, size_t n, const float* a, const float* b, const float* wa, const float* wb,
                     const float* dy, float* da, float* db, float* dwa, float* dwb, bool accumulate_da,
                     bool accumulate_db) {
    if (ex.is_cuda()) SF_FAIL("fusion_backward: CUDA backend not implemented yet");
    fusion_backward_ref(n, a, b, wa, wb, dy, da, db, dwa, dwb, accumulate_da, accumulate_db);
}

}  // namespace kern
