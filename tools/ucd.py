"""Reading the Unicode Character Database text files, shared by the table generators.

gen_unicode_tables.py and gen_nfc_tables.py read the same file format (UAX #44: fields separated by ';',
'#' starts a comment, code points in hex, ranges written FIRST..LAST), so the parsing lives here once and
both generators see the files exactly the same way.
"""

MAX_CP = 0x10FFFF


def data_lines(path):
    """The ';'-separated, stripped fields of each non-empty line of a UCD file, comments removed."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield [field.strip() for field in line.split(";")]


def parse_range(text):
    """(first, last) of "0041..005A" or of a single code point "00C5"."""
    if ".." in text:
        a, b = text.split("..")
        return int(a, 16), int(b, 16)
    return int(text, 16), int(text, 16)
