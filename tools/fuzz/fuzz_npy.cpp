// libFuzzer target: the NPY parser on arbitrary bytes. Any input must either parse into an array
// whose every element lies inside the buffer, or throw rt::Error; never crash, hang or read
// outside the buffer (ASan/UBSan watch). Built and run by tools/fuzz/run_fuzz.sh.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/npy.h"
#include "runtime/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // A private copy, so that ASan flags any read past the end of the input.
    std::vector<uint8_t> buf(data, data + size);
    try {
        const data::NpyArray a = data::parse_npy(buf.data(), buf.size(), "fuzz.npy");
        if (a.data + a.bytes != buf.data() + buf.size()) __builtin_trap();  // the data must end the file
        double sum = 0;
        for (size_t i = 0; i < a.numel; ++i) sum += a.value(i);
        volatile double sink = sum;
        (void)sink;
        (void)a.shape_str();
        try {
            a.expect(data::NpyDType::Float32, {-1, 2});
        } catch (const rt::Error&) {
        }
    } catch (const rt::Error&) {
    }
    return 0;
}
