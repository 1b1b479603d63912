// Effective initialisation of the original (MODEL_SPEC §1.6) from a counter-based generator
// that the PyTorch reference reproduces bit for bit (docs/MODEL.md "Initialisation").
#pragma once
#include <cstdint>

#include "model/params.h"

namespace model {

// The generator: h(seed, t, j) = mix(mix(mix(seed) ^ t) ^ j), mix = splitmix64's finaliser.
uint64_t init_hash(uint64_t seed, uint64_t t, uint64_t j);
// Standard normal draw for element i of parameter t (Box-Muller on two hashes, double).
double init_normal(uint64_t seed, uint64_t t, uint64_t i);

// Writes the initial parameters (master range, our layout), BN running stats and counters.
void init_parameters(const ParamTable& table, uint64_t seed, float* master, float* buffers, int64_t* counters);

}  // namespace model
