// TINYLLM_CLONES: build a hot loop twice, for baseline x86-64 and for AVX2,
// and pick one at load time. Neither clone has FMA, so both give the same
// bits, and every x86-64 machine the same result for the same input. Not
// under ThreadSanitizer: a clone's resolver runs while the program loads,
// before the sanitizer's runtime is up, and faults.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TINYLLM_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define TINYLLM_CLONES
#endif
