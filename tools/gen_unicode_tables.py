#!/usr/bin/env python3
"""Generates src/runtime/tokenizer/unicode_data.cpp from the Unicode Character Database.

Why a generator: the tokenizer's regex engine needs general categories, White_Space, scripts and simple
case mappings for every code point. Checking in the generated tables (instead of reading the UCD at run
time) keeps the library free of data files; the tables are compact run-length forms (a start point per
run of equal values, or (first, last, delta, stride) runs for case mappings) so the source stays small
and lookups are a binary search.

Usage (Debian package `unicode-data` installs the UCD under /usr/share/unicode):
    python3 tools/gen_unicode_tables.py [UCD_DIR] [OUTPUT]
defaults: /usr/share/unicode  src/runtime/tokenizer/unicode_data.cpp
"""
import os
import re
import sys

from ucd import MAX_CP, data_lines, parse_range

# Order must match ga::text::GeneralCategory in src/runtime/tokenizer/unicode.h.
CATEGORIES = ["Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps", "Pe",
              "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"]


def read_unicode_data(ucd):
    """Returns (category per code point as a bytearray, simple lowercase map)."""
    cats = bytearray(MAX_CP + 1)  # 0 = Cn (unassigned)
    lower = {}
    range_first = None
    for fields in data_lines(os.path.join(ucd, "UnicodeData.txt")):
        cp = int(fields[0], 16)
        name, cat = fields[1], CATEGORIES.index(fields[2])
        if name.endswith(", First>"):
            range_first = cp
            continue
        if name.endswith(", Last>"):
            for c in range(range_first, cp + 1):
                cats[c] = cat
            range_first = None
            continue
        cats[cp] = cat
        if fields[13]:
            lower[cp] = int(fields[13], 16)
    return cats, lower


def read_white_space(ucd):
    ranges = []
    for fields in data_lines(os.path.join(ucd, "PropList.txt")):
        if fields[1] == "White_Space":
            ranges.append(parse_range(fields[0]))
    return merge_ranges(sorted(ranges))


def read_scripts(ucd):
    values = [0] * (MAX_CP + 1)  # 0 = Unknown (Zzzz)
    names = ["Unknown"]
    for fields in data_lines(os.path.join(ucd, "Scripts.txt")):
        first, last = parse_range(fields[0])
        if fields[1] not in names:
            names.append(fields[1])
        idx = names.index(fields[1])
        for c in range(first, last + 1):
            values[c] = idx
    return values, names


def read_script_aliases(ucd):
    """Short codes (Hani, Latn...) for each long script name, from PropertyValueAliases.txt."""
    aliases = {}
    for fields in data_lines(os.path.join(ucd, "PropertyValueAliases.txt")):
        if fields[0] == "sc":
            aliases[fields[2]] = fields[1]
    return aliases


def read_simple_folding(ucd):
    fold = {}
    for fields in data_lines(os.path.join(ucd, "CaseFolding.txt")):
        if fields[1] in ("C", "S"):
            fold[int(fields[0], 16)] = int(fields[2], 16)
    return fold


def merge_ranges(ranges):
    merged = []
    for a, b in ranges:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    return merged


def run_starts(values):
    """(start, value) at each code point where the value changes; the first start is 0."""
    starts = []
    prev = None
    for cp, v in enumerate(values):
        if v != prev:
            starts.append((cp, v))
            prev = v
    return starts


def delta_runs(mapping):
    """Compresses cp -> target into (first, last, delta, stride) runs: every cp = first + k*stride <= last
    maps to cp + delta, and no other cp in [first, last] is in the mapping with a different meaning."""
    runs = []
    for cp in sorted(mapping):
        delta = mapping[cp] - cp
        if runs:
            first, last, d, stride = runs[-1]
            if d == delta:
                if stride == 0 and cp - last in (1, 2):
                    runs[-1] = (first, cp, d, cp - last)
                    continue
                if stride and cp - last == stride:
                    runs[-1] = (first, cp, d, stride)
                    continue
        runs.append((cp, cp, delta, 0))
    out = []
    for first, last, d, stride in runs:
        out.append((first, last, d, stride or 1))
    # Self-check: the compressed form reproduces the mapping exactly.
    for first, last, d, stride in out:
        for cp in range(first, last + 1, stride):
            assert mapping.get(cp) == cp + d, hex(cp)
    assert sum((last - first) // stride + 1 for first, last, _, stride in out) == len(mapping)
    return out


def emit_rows(items, per_line):
    lines = []
    for i in range(0, len(items), per_line):
        lines.append("    " + " ".join(items[i:i + per_line]))
    return "\n".join(lines)


def ucd_version(ucd):
    with open(os.path.join(ucd, "ReadMe.txt"), encoding="utf-8") as f:
        m = re.search(r"Version (\d+\.\d+\.\d+)", f.read())
    return m.group(1) if m else "unknown"


def main():
    ucd = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
    out_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src", "runtime", "tokenizer", "unicode_data.cpp")
    version = ucd_version(ucd)
    cats, lower = read_unicode_data(ucd)
    white = read_white_space(ucd)
    scripts, script_names = read_scripts(ucd)
    aliases = read_script_aliases(ucd)
    fold = read_simple_folding(ucd)

    cat_runs = run_starts(cats)
    script_runs = run_starts(scripts)
    lower_runs = delta_runs(lower)
    fold_runs = delta_runs(fold)

    o = []
    o.append("// GENERATED FILE, do not edit. Unicode Character Database %s tables for the tokenizer regex engine."
             % version)
    o.append("// Regenerate with: python3 tools/gen_unicode_tables.py /usr/share/unicode "
             "src/runtime/tokenizer/unicode_data.cpp")
    o.append("// (Debian package unicode-data provides /usr/share/unicode). Layout is described in unicode_data.h.")
    o.append('#include "runtime/tokenizer/unicode_data.h"')
    o.append("")
    o.append("namespace ga::text::detail {")
    o.append("")
    o.append('const char* const kUnicodeVersion = "%s";' % version)
    o.append("")
    def table(comment, ctype, name, count_name, rows):
        """One C array of rows (lines of initializers), then its element count as a size_t constant."""
        o.extend(["// " + comment, "const %s %s[] = {" % (ctype, name), *rows, "};",
                  "const size_t %s = sizeof(%s) / sizeof(%s[0]);" % (count_name, name, name), ""])

    def packed(fmt, values, per_line):
        return [emit_rows([fmt % v for v in values], per_line)]

    table("(first code point of a run, GeneralCategory) for %d runs covering U+0000..U+10FFFF." % len(cat_runs),
          "ValueRun", "kCategoryRuns", "kCategoryRunCount", packed("{0x%X,%d},", cat_runs, 7))
    table("White_Space (PropList.txt) as inclusive ranges.",
          "CodeRange", "kWhiteSpaceRanges", "kWhiteSpaceRangeCount", packed("{0x%X,0x%X},", white, 6))
    script_rows = ['    {"%s", "%s"},' % (name, "Zzzz" if name == "Unknown" else aliases.get(name, name))
                   for name in script_names]
    table("Script names (Scripts.txt) and their ISO 15924 codes; index 0 is Unknown (unlisted code points).",
          "ScriptName", "kScriptNames", "kScriptCount", script_rows)
    table("(first code point of a run, script index) for %d runs." % len(script_runs),
          "ValueRun", "kScriptRuns", "kScriptRunCount", packed("{0x%X,%d},", script_runs, 7))
    table("Simple lowercase mapping (UnicodeData.txt field 13) as (first, last, delta, stride) runs.",
          "DeltaRun", "kLowercaseRuns", "kLowercaseRunCount", packed("{0x%X,0x%X,%d,%d},", lower_runs, 4))
    table("Simple case folding (CaseFolding.txt statuses C and S) as (first, last, delta, stride) runs.",
          "DeltaRun", "kCaseFoldRuns", "kCaseFoldRunCount", packed("{0x%X,0x%X,%d,%d},", fold_runs, 4))
    o.append("}  // namespace ga::text::detail")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(o) + "\n")
    print("wrote %s: %d category runs, %d script runs, %d lowercase runs, %d fold runs" % (
        out_path, len(cat_runs), len(script_runs), len(lower_runs), len(fold_runs)))


if __name__ == "__main__":
    main()
