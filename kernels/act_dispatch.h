// The activation as a compile-time constant: with_act(a, f) calls f(std::integral_constant<Act, A>{}) for
// the runtime activation a, so a launcher picks the kernel instance of its activation in one place.
#pragma once

#include <type_traits>

#include "kernels/tensor.h"

namespace kern {

template <class F>
void with_act(Act a, F&& f) {
    switch (a) {
        case Act::None: return f(std::integral_constant<Act, Act::None>{});
        case Act::Silu: return f(std::integral_constant<Act, Act::Silu>{});
        case Act::Relu: return f(std::integral_constant<Act, Act::Relu>{});
    }
}

}  // namespace kern
