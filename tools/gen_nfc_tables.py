#!/usr/bin/env python3
"""Generates src/runtime/tokenizer/nfc_data.cpp (Unicode NFC tables) from the Unicode Character Database.

Why a generator: NFC (UAX #15) needs, per code point, the canonical combining class, the NFC quick-check
value and the canonical decomposition, plus the table of primary composites. Checking the generated tables
in keeps the library free of data files at run time. The tables are sorted arrays searched by binary search:
- runs of code points sharing a non-default (ccc, NFC_QC) pair; everything else is ccc 0 and NFC_QC=Yes,
  so the runtime's fast path needs one lookup per non-ASCII code point;
- one-level canonical decompositions (1 or 2 code points, UnicodeData.txt field 5 without a <tag>); the
  runtime applies them recursively;
- canonical compositions (pairs whose composite is not Full_Composition_Exclusion), sorted by pair.
Hangul syllables are algorithmic (Unicode ch. 3.12) and appear in none of the tables.

The generator cross-checks its inputs: Full_Composition_Exclusion computed from CompositionExclusions.txt,
singletons and non-starter decompositions must equal the derived property in DerivedNormalizationProps.txt.

Usage (Debian package `unicode-data` installs the UCD under /usr/share/unicode):
    python3 tools/gen_nfc_tables.py [UCD_DIR] [OUTPUT]
defaults: /usr/share/unicode  src/runtime/tokenizer/nfc_data.cpp
"""
import os
import re
import sys

from ucd import data_lines, parse_range

QC_VALUES = {"Y": 0, "M": 1, "N": 2}  # must match ga::tok::nfc_data::QuickCheck


def ucd_version(ucd):
    """The version from the header of DerivedNormalizationProps.txt ("# DerivedNormalizationProps-15.0.0.txt")."""
    with open(os.path.join(ucd, "DerivedNormalizationProps.txt"), encoding="utf-8") as f:
        m = re.match(r"# DerivedNormalizationProps-(\d+\.\d+\.\d+)\.txt", f.readline())
    if not m:
        sys.exit("cannot read the Unicode version from DerivedNormalizationProps.txt")
    return m.group(1)


def read_unicode_data(ucd):
    """Returns ({cp: ccc} for non-zero classes, {cp: [canonical decomposition]})."""
    ccc, decomp = {}, {}
    for fields in data_lines(os.path.join(ucd, "UnicodeData.txt")):
        cp = int(fields[0], 16)
        if fields[1].endswith(", Last>"):
            continue  # ranges (CJK, Hangul, ...) have class 0 and no field-5 mapping
        if int(fields[3]):
            ccc[cp] = int(fields[3])
        if fields[5] and not fields[5].startswith("<"):
            decomp[cp] = [int(x, 16) for x in fields[5].split()]
    return ccc, decomp


def read_derived(ucd):
    """Returns ({cp: quick-check value} for NFC_QC != Yes, set of Full_Composition_Exclusion code points)."""
    qc, fce = {}, set()
    for fields in data_lines(os.path.join(ucd, "DerivedNormalizationProps.txt")):
        first, last = parse_range(fields[0])
        if fields[1] == "NFC_QC":
            for c in range(first, last + 1):
                qc[c] = QC_VALUES[fields[2]]
        elif fields[1] == "Full_Composition_Exclusion":
            fce.update(range(first, last + 1))
    return qc, fce


def read_exclusions(ucd):
    return {parse_range(fields[0])[0] for fields in data_lines(os.path.join(ucd, "CompositionExclusions.txt"))}


def compositions(ccc, decomp, exclusions, fce):
    """Primary composites as (first, second, composite), after checking our FCE against the derived one."""
    computed_fce = set(exclusions)
    for cp, d in decomp.items():
        if len(d) == 1 or ccc.get(cp, 0) != 0 or ccc.get(d[0], 0) != 0:
            computed_fce.add(cp)  # singletons and non-starter decompositions never recompose
    if computed_fce != fce:
        sys.exit("Full_Composition_Exclusion mismatch: %d computed vs %d derived" % (len(computed_fce), len(fce)))
    return sorted((d[0], d[1], cp) for cp, d in decomp.items() if cp not in fce)


def norm_runs(ccc, qc):
    """Runs (first, last, ccc, qc) of consecutive code points with equal non-default values."""
    runs = []
    for cp in sorted(set(ccc) | set(qc)):
        value = (ccc.get(cp, 0), qc.get(cp, 0))
        if runs and runs[-1][1] == cp - 1 and runs[-1][2:] == value:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, *value])
    return runs


def rows(items, width=120, indent="    "):
    """Packs initializers into lines of at most `width` columns."""
    lines, line = [], indent
    for item in items:
        if len(line) + len(item) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += item + " "
    lines.append(line.rstrip())
    return "\n".join(lines)


def main():
    ucd = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
    out_path = sys.argv[2] if len(sys.argv) > 2 else "src/runtime/tokenizer/nfc_data.cpp"
    version = ucd_version(ucd)
    ccc, decomp = read_unicode_data(ucd)
    qc, fce = read_derived(ucd)
    comps = compositions(ccc, decomp, read_exclusions(ucd), fce)
    runs = norm_runs(ccc, qc)
    if any(len(d) > 2 for d in decomp.values()):
        sys.exit("a canonical decomposition longer than 2 code points: the table layout assumes <= 2")
    # The runtime cuts text before each code point of class 0 with NFC_QC=Yes and normalizes the pieces
    # independently. That is exact only if such a code point's full decomposition starts with one too
    # (nothing in it can then reorder or compose with the text before it): check it.
    def first_of_full_decomposition(cp):
        return first_of_full_decomposition(decomp[cp][0]) if cp in decomp else cp
    for cp in decomp:
        head = first_of_full_decomposition(cp)
        if ccc.get(cp, 0) == 0 and qc.get(cp, 0) == 0 and (ccc.get(head, 0) != 0 or qc.get(head, 0) != 0):
            sys.exit("U+%04X is a boundary but its decomposition starts with U+%04X, which is not" % (cp, head))
    # The runtime's fast path treats everything below the first run as ccc 0 / NFC_QC=Yes without lookup.
    assert runs[0][0] >= 0x80, "the ASCII fast path assumes ASCII is ccc 0 and NFC_QC=Yes"

    run_items = ["{0x%X,0x%X,%d,%d}," % tuple(r) for r in runs]
    dec_items = ["{0x%X,0x%X,0x%X}," % (cp, d[0], d[1] if len(d) > 1 else 0) for cp, d in sorted(decomp.items())]
    comp_items = ["{0x%X,0x%X,0x%X}," % c for c in comps]
    text = f"""\
// GENERATED FILE, do not edit. Unicode Character Database {version} tables for NFC (see nfc.h, nfc_data.h).
// Regenerate with: python3 tools/gen_nfc_tables.py /usr/share/unicode src/runtime/tokenizer/nfc_data.cpp
// (Debian package unicode-data provides /usr/share/unicode: UnicodeData.txt, CompositionExclusions.txt,
// DerivedNormalizationProps.txt).
#include "runtime/tokenizer/nfc_data.h"

namespace ga::tok::nfc_data {{
namespace {{

// clang-format off
// (first, last, canonical combining class, NFC_QC) for {len(runs)} runs; code points outside them: 0, Yes.
const NormRun kNormRuns[] = {{
{rows(run_items)}
}};

// (code point, first, second or 0) canonical decompositions of {len(dec_items)} code points, one level deep.
const Decomposition kDecompositions[] = {{
{rows(dec_items)}
}};

// (first, second, primary composite) for {len(comp_items)} canonical compositions, sorted by (first, second).
const Composition kCompositions[] = {{
{rows(comp_items)}
}};
// clang-format on

}}  // namespace

const char* unicode_version() {{ return "{version}"; }}
std::span<const NormRun> norm_runs() {{ return kNormRuns; }}
std::span<const Decomposition> decompositions() {{ return kDecompositions; }}
std::span<const Composition> compositions() {{ return kCompositions; }}

}}  // namespace ga::tok::nfc_data
"""
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(text)
    print("wrote %s: %d runs, %d decompositions, %d compositions (Unicode %s)"
          % (out_path, len(runs), len(dec_items), len(comp_items), version))


if __name__ == "__main__":
    main()
