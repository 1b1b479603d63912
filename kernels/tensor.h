// Shapes shared by every op. Activations are NHWC (channels innermost); conv filters are KRSC
// (Cout, kh, kw, Cin/groups). CPU reference ops are templates instantiated for float and double
// (double for finite-difference tests); the model runs them in float.
#pragma once
#include <cstddef>

namespace kern {

struct Shape4 {
    int n = 0, h = 0, w = 0, c = 0;
    size_t pixels() const { return static_cast<size_t>(n) * h * w; }
    size_t numel() const { return pixels() * c; }
    bool operator==(const Shape4& o) const { return n == o.n && h == o.h && w == o.w && c == o.c; }
};

enum class Act { None, Silu, Relu };
const char* act_name(Act a);

}  // namespace kern
