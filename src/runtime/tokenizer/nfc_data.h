// Unicode tables for the NFC check (see nfc.h); generated data, defined in nfc_data.cpp.
#pragma once

#include <cstdint>
#include <span>

namespace ga::tok::nfc_data {

struct CccRun {
  char32_t first, last;
  uint8_t ccc;  // canonical combining class of every code point in [first, last]
};
struct CpRange {
  char32_t first, last;
};
struct Composition {
  char32_t first, second, composite;  // a primary composite and its canonical decomposition
};

std::span<const CccRun> ccc_runs();                 // sorted, non-zero classes only
std::span<const CpRange> nfc_quick_check_no();      // code points NFC always changes
std::span<const CpRange> composition_seconds();     // code points that can be the second of a composition
std::span<const Composition> compositions();        // sorted by (first, second)

}  // namespace ga::tok::nfc_data
