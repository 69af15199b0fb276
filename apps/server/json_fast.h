// A fast parser for the plain request bodies that nearly every client sends, with nlohmann-json's DOM as output.
//
// Why: a completion request's body is mostly its prompt, and a prompt of token ids is a long array of integers.
// nlohmann's lexer costs ~0.1 us per number (it copies every token into a string and converts it from there), so
// a 128-id prompt took 13 us to parse hot on the dev machine and 55-70 us on the H200 host's HTTP thread (512 ids:
// ~60 / 140 us), on the way to a lone request's first token. This parser reads the same grammar directly into the
// same DOM in a few nanoseconds per byte (with it and a warm thread: 21-23 us / 47 us on the H200 host, parse_request
// included).
//
// It is an accelerator, not a second JSON parser: it accepts only a subset whose meaning is unambiguous and
// declines (std::nullopt) everything else, which then goes to nlohmann::json::parse as before, with the same
// result or the same error. The subset: a top-level object; strings of printable ASCII with the escapes \" \\ \/
// \b \f \n \r \t (no \u, no bytes >= 0x80: UTF-8 validation stays nlohmann's); integers of at most 18 digits
// (stored as nlohmann does: unsigned when >= 0, signed when negative); other numbers by strtod, as nlohmann
// converts them (declined when not finite); true, false, null; nesting at most 64 deep; JSON whitespace. A key
// given twice keeps its last value, as nlohmann's DOM does. tests/server/test_request_parse.cpp checks that
// every body it accepts gives nlohmann's DOM exactly (types included) and that it declines what nlohmann refuses.
//
// A completion's prompt of token ids need not become a DOM at all: with a FastIntegerField naming "prompt", a
// top-level value that is a non-empty array of the subset's integers is read straight into a vector (no json node
// per id: ~65 ns each on the H200 host's HTTP thread) and the key is left out of the DOM. Any other value of that
// key (a string, an empty array, a float among the ids, nested arrays) goes into the DOM as before, so the caller's
// checks and error messages see it unchanged. tests/server/test_json_fast.cpp puts the ids back and compares with
// nlohmann's DOM; tests/server/test_request_parse.cpp compares parse_request with and without the fast reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ga::server {

// A top-level key whose value, when it is a non-empty array of integers, is read into `values` instead of the DOM.
struct FastIntegerField {
  std::string_view key;          // e.g. "prompt"
  bool present = false;          // the key's (last) value was such an array: `values` holds it, the DOM lacks the key
  std::vector<int64_t> values;   // each id as nlohmann's get<int64_t>() gives it (18 digits at most: no overflow)
};

// The body's DOM, or std::nullopt when it is outside the subset (then `integers`, if given, says nothing).
std::optional<nlohmann::json> parse_json_object_fast(std::string_view text, FastIntegerField* integers = nullptr);

}  // namespace ga::server
