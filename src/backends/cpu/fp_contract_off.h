// Switches off floating-point contraction (fusing a * b + c into one FMA) for the rest of the translation
// unit. Include it FIRST in a file, before any other header.
//
// Why: the quantization and dequantization files must be bit-exact with ggml's reference code, which
// rounds every multiply and every add separately; one fused multiply-add rounds once and moves values
// across rounding boundaries. GCC contracts across statements by default even in ISO C++ mode, and its
// optimize pragma applies to the functions defined after it (inline functions of later headers
// included), hence "first". Clang's file-scope pragma likewise holds to the end of the translation unit.
// The compiler-specific spelling lives here once instead of in every such file.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
