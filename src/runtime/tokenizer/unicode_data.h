// Raw Unicode Character Database tables, generated into unicode_data.cpp by tools/gen_unicode_tables.py.
//
// The tables are run-length forms sorted by code point so that every query is one binary search and the
// generated source stays small (a few thousand runs instead of 1.1 million entries). Only unicode.cpp reads
// them; everything else asks the typed queries in unicode.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ga::text::detail {

// A run of code points sharing one value: it starts at `first` and ends where the next run starts.
struct ValueRun {
  uint32_t first;
  uint8_t value;
};

struct CodeRange {
  uint32_t first;
  uint32_t last;  // inclusive
};

// Code points first, first + stride, ... <= last map to cp + delta. Runs do not overlap.
struct DeltaRun {
  uint32_t first;
  uint32_t last;
  int32_t delta;
  uint8_t stride;
};

struct ScriptName {
  const char* name;  // Scripts.txt spelling, e.g. "Han"
  const char* code;  // ISO 15924 code, e.g. "Hani"
};

extern const char* const kUnicodeVersion;
extern const ValueRun kCategoryRuns[];  // value: GeneralCategory
extern const size_t kCategoryRunCount;
extern const CodeRange kWhiteSpaceRanges[];
extern const size_t kWhiteSpaceRangeCount;
extern const ScriptName kScriptNames[];
extern const size_t kScriptCount;
extern const ValueRun kScriptRuns[];  // value: index into kScriptNames
extern const size_t kScriptRunCount;
extern const DeltaRun kLowercaseRuns[];
extern const size_t kLowercaseRunCount;
extern const DeltaRun kCaseFoldRuns[];
extern const size_t kCaseFoldRunCount;

}  // namespace ga::text::detail
